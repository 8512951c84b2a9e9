package core

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/store"
)

// takeOnly is a Store that cannot release a slot.
type takeOnly struct{ s store.Store }

func (t takeOnly) Take(ctx context.Context, key string, n int64, limits ...store.Spec) (store.Result, error) {
	return t.s.Take(ctx, key, n, limits...)
}

// New, SetLimits and SetPlans refuse an InFlight limit on a store, or a
// local fallback store, that cannot release slots; other limits are fine.
func TestInFlightNeedsReleaser(t *testing.T) {
	key := func(*http.Request) (string, error) { return "k", nil }
	inflight := []store.Limit{store.MaxInFlight(2, time.Minute)}
	if _, err := New(takeOnly{memorystore.New()}, "test", key, inflight); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("New on a store without Release: %v, want ErrInvalidOption", err)
	}
	if _, err := New(memorystore.New(), "test", key, inflight, WithFallbackStore(takeOnly{memorystore.New()})); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("New with a fallback store without Release: %v, want ErrInvalidOption", err)
	}
	if _, err := New(memorystore.New(), "test", key, inflight, WithFallbackStore(takeOnly{memorystore.New()}), WithFailurePolicy(FailOpen)); err != nil {
		t.Errorf("New with an unused fallback store without Release: %v", err)
	}
	l, err := New(takeOnly{memorystore.New()}, "test", key, []store.Limit{store.PerMinute(10)})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.SetLimits(inflight); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("SetLimits(MaxInFlight) on a store without Release: %v, want ErrInvalidOption", err)
	}
	plans := map[string][]store.Limit{"free": inflight}
	of := func(*http.Request) string { return "free" }
	if _, err := New(takeOnly{memorystore.New()}, "test", key, []store.Limit{store.PerMinute(10)}, WithPlans(of, plans)); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("a plan with MaxInFlight on a store without Release: %v, want ErrInvalidOption", err)
	}
}

// A slot is held by the Decision that took it and given back by Done,
// once: a second Done frees nothing more; a request refused holds none.
func TestInFlightDone(t *testing.T) {
	key := func(*http.Request) (string, error) { return "k", nil }
	l, err := New(memorystore.New(), "test", key, []store.Limit{store.MaxInFlight(2, time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	req := func() Decision { return l.Decide(httptest.NewRequest(http.MethodGet, "/", nil)) }
	a, b, c := req(), req(), req()
	if !a.NeedsDone() || !b.NeedsDone() || c.NeedsDone() || c.Action != Refuse {
		t.Fatalf("3 requests on 2 slots: NeedsDone %v %v %v, third %v", a.NeedsDone(), b.NeedsDone(), c.NeedsDone(), c.Action)
	}
	if c.Result.Limit != 2 || c.Result.Remaining != 0 || c.Result.RetryAfter != time.Second {
		t.Errorf("refusal: %+v, want Limit 2, Remaining 0, RetryAfter 1s", c.Result)
	}
	c.Done(http.StatusTooManyRequests) // holds nothing: no effect
	a.Done(http.StatusOK)
	a.Done(http.StatusOK)
	if d := req(); d.Action != Serve || d.Result.Remaining != 0 {
		t.Errorf("after one Done: %v remaining %d, want served, 0 left", d.Action, d.Result.Remaining)
	}
	if d := req(); d.Action != Refuse {
		t.Errorf("a second Done freed a second slot: %v", d.Action)
	}
}

// With WithCountIf, Done releases the slot whatever the status, and gives
// back the rate's charge only for a status count does not count.
func TestInFlightWithCountIf(t *testing.T) {
	key := func(*http.Request) (string, error) { return "k", nil }
	rate := store.Limit{Algorithm: store.TokenBucket, Rate: 2, Period: time.Hour}
	l, err := New(memorystore.New(), "test", key, []store.Limit{store.MaxInFlight(1, time.Hour), rate},
		WithCountIf(func(status int) bool { return status < 400 }))
	if err != nil {
		t.Fatal(err)
	}
	req := func() Decision { return l.Decide(httptest.NewRequest(http.MethodGet, "/", nil)) }
	a := req()
	if a.Action != Serve || req().Action != Refuse {
		t.Fatal("MaxInFlight(1): want the first served, the second refused")
	}
	a.Done(http.StatusInternalServerError) // released, and not counted
	b := req()
	if b.Action != Serve || b.Result.PerLimit[1].Remaining != 1 {
		t.Fatalf("after a 500: %v, rate remaining %d; want served, 1 left (the 500 given back)", b.Action, b.Result.PerLimit[1].Remaining)
	}
	b.Done(http.StatusOK) // released, and counted
	if c := req(); c.Action != Serve || c.Result.PerLimit[1].Remaining != 0 {
		t.Fatalf("after a 200: %v, rate remaining %d; want served, 0 left", c.Action, c.Result.PerLimit[1].Remaining)
	}
}

// The shared fallback does not decide a key from a store's answer bound
// by an InFlight limit (its free slots come back when requests end), and
// charges its debts without the InFlight limits (no request would release
// a slot a debt took).
func TestInFlightSharedFallback(t *testing.T) {
	key := func(*http.Request) (string, error) { return "k", nil }
	rate := store.Limit{Algorithm: store.TokenBucket, Rate: 2, Period: time.Hour}
	l, err := New(memorystore.New(), "test", key, []store.Limit{store.MaxInFlight(1, time.Hour), rate})
	if err != nil {
		t.Fatal(err)
	}
	cfg := l.cfg.Load()
	f := newLocalFallback(takeOnly{memorystore.New()})
	now := time.Now()
	for binding, known := range []bool{false, true} {
		res := store.Result{Allowed: true, Limit: 2, Remaining: 1, ResetAfter: time.Minute, Binding: binding}
		f.remember("k", &res, cfg, now, ticket{})
		if r := f.shard("k").m["k"]; r.known != known {
			t.Errorf("an answer bound by limit %d: known %v, want %v", binding, r.known, known)
		}
	}
	if got := withoutInFlight(cfg.take); len(got) != 1 || got[0] != cfg.take[1] {
		t.Errorf("withoutInFlight(%v) = %v, want the rate alone", cfg.take, got)
	}
}
