package core

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/store"
)

// DecideKey decides for a key as Decide does for a request keyed so: the
// same allowance, the plan's limits by name, the cost as given, observed
// without a request.
func TestDecideKey(t *testing.T) {
	ctx := context.Background()
	clock := newFakeClock(t0)
	rec := &recorder{}
	refusals := 0
	l := memoryLimiter(t, clock, []store.Limit{store.PerMinute(3)},
		WithPlans(func(r *http.Request) string { return r.Header.Get("X-Plan") }, map[string][]store.Limit{"pro": {store.PerMinute(10)}}),
		WithObserver(rec.observe),
		WithRefusal(func(*http.Request, Decision) Response { refusals++; return Response{} }))

	// One allowance for the request keyed "alice" and DecideKey("alice").
	if d := l.Decide(request("alice")); d.Action != Serve || d.Result.Remaining != 2 {
		t.Fatalf("request: %v %+v", d.Action, d.Result)
	}
	d := l.DecideKey(ctx, "alice", "", 2)
	if d.Action != Serve || d.Result.Remaining != 0 || d.Result.Limit != 3 {
		t.Fatalf("DecideKey cost 2: %v %+v", d.Action, d.Result)
	}
	ev := rec.last(t)
	if ev.Request != nil || ev.Key != "alice" || ev.Cost != 2 || ev.Outcome != OutcomeAllowed || ev.Limiter != "test" || ev.Limit != store.PerMinute(3) {
		t.Errorf("event %+v", ev)
	}
	d = l.DecideKey(ctx, "alice", "", 1)
	if d.Action != Refuse || d.Outcome != OutcomeDenied || d.Result.RetryAfter != 20*time.Second {
		t.Fatalf("over the limit: %v %v %+v", d.Action, d.Outcome, d.Result)
	}
	if d.Response().Status != http.StatusTooManyRequests || refusals != 0 {
		t.Errorf("refusal: %+v, refusal function called %d times (takes a request: never)", d.Response(), refusals)
	}
	if d := l.Decide(request("alice")); d.Action != Refuse {
		t.Errorf("the request after DecideKey spent the allowance: %v", d.Action)
	}

	// A plan by name; an unknown one is the Limiter's own limits.
	if d := l.DecideKey(ctx, "alice", "pro", 1); d.Action != Serve || d.Result.Limit != 10 || rec.last(t).Plan != "pro" {
		t.Errorf("plan pro: %v %+v", d.Action, d.Result)
	}
	if d := l.DecideKey(ctx, "bob", "gold", 1); d.Action != Serve || d.Result.Limit != 3 || rec.last(t).Plan != "" {
		t.Errorf("unknown plan: %v %+v", d.Action, d.Result)
	}

	// A negative cost is 1, reported.
	d = l.DecideKey(ctx, "carol", "", -5)
	if ev := rec.last(t); d.Result.Remaining != 2 || ev.Cost != 1 || !errors.Is(ev.Err, store.ErrNegativeCost) {
		t.Errorf("negative cost: %+v, event %+v", d.Result, ev)
	}
}

func TestDecideKeyEmptyKey(t *testing.T) {
	for _, tc := range []struct {
		rule KeyErrorRule
		want Action
	}{{KeyErrorPerAddress, Refuse}, {KeyErrorDeny, Refuse}, {KeyErrorAllow, Serve}} {
		rec := &recorder{}
		st := &scriptStore{}
		l := mustNew(t, st, perSecond10, WithKeyErrorRule(tc.rule, nil), WithObserver(rec.observe))
		d := l.DecideKey(context.Background(), "", "", 1)
		ev := rec.last(t)
		if d.Action != tc.want || d.Outcome != OutcomeKeyError || !errors.Is(ev.KeyErr, ErrNoKey) || len(st.calls) != 0 {
			t.Errorf("rule %d: %v %v, event %+v, %d store calls", tc.rule, d.Action, d.Outcome, ev, len(st.calls))
		}
		if tc.want == Refuse && d.Response().Status != http.StatusForbidden {
			t.Errorf("rule %d: response %d", tc.rule, d.Response().Status)
		}
	}
}

// The failure policy, shadow mode, a Hold and a MaxInFlight slot work for
// DecideKey as for Decide.
func TestDecideKeyPolicies(t *testing.T) {
	ctx := context.Background()
	failing := &scriptStore{take: func(context.Context, string, int64) (store.Result, error) { return store.Result{}, errors.New("down") }}
	if d := mustNew(t, failing, perSecond10, WithFailurePolicy(FailClosed)).DecideKey(ctx, "a", "", 1); d.Action != Refuse || d.Outcome != OutcomeFailedClosed {
		t.Errorf("fail closed: %v %v", d.Action, d.Outcome)
	}
	if d := mustNew(t, failing, perSecond10, WithFailurePolicy(FailOpen)).DecideKey(ctx, "a", "", 1); d.Action != Serve || d.Outcome != OutcomeFailedOpen {
		t.Errorf("fail open: %v %v", d.Action, d.Outcome)
	}
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if d := mustNew(t, failing, perSecond10).DecideKey(canceled, "a", "", 1); d.Action != Refuse || d.Outcome != OutcomeCanceled {
		t.Errorf("canceled: %v %v", d.Action, d.Outcome)
	}

	clock := newFakeClock(t0)
	shadow := memoryLimiter(t, clock, []store.Limit{store.PerMinute(1)}, WithShadow())
	shadow.DecideKey(ctx, "a", "", 1)
	if d := shadow.DecideKey(ctx, "a", "", 1); d.Action != Serve || d.Outcome != OutcomeShadowDenied {
		t.Errorf("shadow: %v %v", d.Action, d.Outcome)
	}

	leaky := memoryLimiter(t, clock, []store.Limit{{Algorithm: store.LeakyBucket, Rate: 1000, Period: time.Second, Burst: 5}})
	leaky.DecideKey(ctx, "a", "", 1)
	d := leaky.DecideKey(ctx, "a", "", 1)
	if d.Action != Hold || d.Delay != time.Millisecond || d.Wait(ctx) != nil {
		t.Errorf("leaky bucket: %v %v", d.Action, d.Delay)
	}

	inFlight := memoryLimiter(t, clock, []store.Limit{store.MaxInFlight(1, time.Minute)})
	d = inFlight.DecideKey(ctx, "a", "", 1)
	if d.Action != Serve || !d.NeedsDone() {
		t.Fatalf("in flight: %v, needs done %v", d.Action, d.NeedsDone())
	}
	if d2 := inFlight.DecideKey(ctx, "a", "", 1); d2.Action != Refuse {
		t.Errorf("second in flight: %v", d2.Action)
	}
	d.Done(http.StatusOK)
	if d2 := inFlight.DecideKey(ctx, "a", "", 1); d2.Action != Serve {
		t.Errorf("after Done: %v", d2.Action)
	}
}

func TestDecideKeyAllocs(t *testing.T) {
	clock := newFakeClock(t0)
	l := memoryLimiter(t, clock, []store.Limit{store.PerSecond(1_000_000)}, withName("bench"))
	ctx := context.Background()
	l.DecideKey(ctx, "client-1", "", 1) // create the state
	allocs := testing.AllocsPerRun(500, func() { l.DecideKey(ctx, "client-1", "", 1) })
	if allocs > 1 { // the store key (name + key)
		t.Errorf("DecideKey made %v allocations, want ≤ 1", allocs)
	}
}

// Event.NearLimit names the limit an admitted decision left with less than
// a fifth of its capacity, the least share first; nothing for a refusal.
func TestEventNearLimit(t *testing.T) {
	clock := newFakeClock(t0)
	rec := &recorder{}
	perSec, perHour := store.PerSecond(10), store.PerHour(20)
	l := memoryLimiter(t, clock, []store.Limit{perSec, perHour}, WithObserver(rec.observe))
	want := []store.Limit{{}, {}, {}, {}, {}, {}, {}, {}, perSec, perSec, {}} // 9 … 0 left of 10/s; then refused
	for i, w := range want {
		l.DecideKey(context.Background(), "a", "", 1)
		if got := rec.last(t).NearLimit; got != w {
			t.Errorf("decision %d: NearLimit %v, want %v", i, got, w)
		}
	}
	clock.Advance(time.Second)
	// 10/s is whole again; 20/h has 10 left, then 3 (15%) after 7 more,
	// while 10/s has 3 (30%): the hourly limit is the nearer.
	for i := 0; i < 7; i++ {
		l.DecideKey(context.Background(), "a", "", 1)
	}
	if ev := rec.last(t); ev.NearLimit != perHour || ev.Limit != perSec {
		t.Errorf("NearLimit %v (binding %v), want %v", ev.NearLimit, ev.Limit, perHour)
	}
}
