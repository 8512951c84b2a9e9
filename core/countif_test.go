package core

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/store"
)

func failures(status int) bool { return status >= 400 }

// refundingStore is a memory store whose Charge or Refund can be made to
// fail.
type refundingStore struct {
	*memorystore.Store
	chargeErr, refundErr error
	refunds              int
}

func (s *refundingStore) Charge(ctx context.Context, key string, n int64, limits ...store.Spec) (store.Result, error) {
	if s.chargeErr != nil {
		return store.Result{}, s.chargeErr
	}
	return s.Store.Charge(ctx, key, n, limits...)
}

func (s *refundingStore) Refund(ctx context.Context, key string, n int64, stamp int64, limits ...store.Spec) error {
	s.refunds++
	if s.refundErr != nil {
		return s.refundErr
	}
	return s.Store.Refund(ctx, key, n, stamp, limits...)
}

func TestCountIfNewChecksTheFunc(t *testing.T) {
	if _, err := New(memorystore.New(), "test", keyFromHeader, perSecond10, WithCountIf(nil)); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("WithCountIf(nil): %v, want ErrInvalidOption", err)
	}
}

// Done gives the charge back for a status count does not count, and only
// then; a Limiter without WithCountIf needs no Done.
func TestCountIfDone(t *testing.T) {
	clock := newFakeClock(time.Unix(1_700_000_000, 0))
	mem := memorystore.New(memorystore.WithClock(clock.Now))
	limits := []store.Limit{{Algorithm: store.FixedWindow, Rate: 2, Period: time.Minute}}
	l := mustNew(t, mem, limits, WithCountIf(failures), WithClock(clock.Now))
	remaining := func() int64 {
		t.Helper()
		st, err := l.Status(request("a"))
		if err != nil {
			t.Fatal(err)
		}
		return st.Remaining
	}
	for i, status := range []int{200, 204, 302, 200, 200} {
		d := l.Decide(request("a"))
		if d.Action != Serve || !d.NeedsDone() {
			t.Fatalf("request %d: %v, NeedsDone %v", i, d.Action, d.NeedsDone())
		}
		d.Done(status)
	}
	before := remaining()
	d := l.Decide(request("a"))
	d.Done(401)
	if after := remaining(); after != before-1 {
		t.Errorf("Remaining %d after a counted 401, want %d", after, before-1)
	}
	d = l.Decide(request("a"))
	d.Done(500)
	if d = l.Decide(request("a")); d.Action != Refuse || d.NeedsDone() {
		t.Errorf("after 2 failures: %v, NeedsDone %v; want a refusal that needs no Done", d.Action, d.NeedsDone())
	}
	plain := mustNew(t, mem, limits, withName("plain"))
	if d := plain.Decide(request("a")); d.NeedsDone() {
		t.Error("a Limiter without WithCountIf needs Done")
	}
}

// A give-back that fails is reported to observers and changes nothing
// else; a decision of the FailLocal fallback is given back to the
// fallback store.
func TestCountIfGiveBackFailureAndFallback(t *testing.T) {
	var rec recorder
	down := errors.New("store down")
	st := &refundingStore{Store: memorystore.New(), refundErr: down}
	fb := &refundingStore{Store: memorystore.New()}
	l := mustNew(t, withLocal(st, fb), []store.Limit{store.PerMinute(3)}, WithCountIf(failures), WithObserver(rec.observe),
		withName("login"))
	d := l.Decide(request("a"))
	d.Done(200)
	ev := rec.last(t)
	if ev.Outcome != OutcomeGiveBackFailed || !errors.Is(ev.Err, down) || ev.Key != "a" || ev.Action != Serve ||
		ev.Limiter != "login" || ev.Limit != store.PerMinute(3) || !ev.Result.Allowed {
		t.Errorf("event after a failed give-back: %+v", ev)
	}
	if st.refunds != 1 || fb.refunds != 0 {
		t.Errorf("refunds: store %d, fallback %d; want 1, 0", st.refunds, fb.refunds)
	}

	st.chargeErr = errors.New("store down")
	d = l.Decide(request("a"))
	if d.Outcome != OutcomeFallback || !d.NeedsDone() {
		t.Fatalf("with the store down: %v, NeedsDone %v", d.Outcome, d.NeedsDone())
	}
	d.Done(200)
	if st.refunds != 1 || fb.refunds != 1 {
		t.Errorf("refunds after a fallback decision: store %d, fallback %d; want 1, 1", st.refunds, fb.refunds)
	}
	r, _ := fb.Peek(context.Background(), l.keyPrefix+"a", 0, l.cfg.Load().take...)
	if r.Remaining != 3 {
		t.Errorf("the fallback store's Remaining after the give-back: %d, want 3", r.Remaining)
	}
}
