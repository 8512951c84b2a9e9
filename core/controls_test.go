package core

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/internal/partial"
)

// headerKey keys requests by their X-Client header.
func headerKey(r *http.Request) (string, error) { return r.Header.Get("X-Client"), nil }

// planHeader plans requests by their X-Plan header.
func planHeader(r *http.Request) string { return r.Header.Get("X-Plan") }

func clientRequest(client, plan string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.Header.Set("X-Client", client)
	if plan != "" {
		r.Header.Set("X-Plan", plan)
	}
	return r
}

// Every algorithm, with and without a penalty, for Status and Reset.
func controlLimits() []store.Limit {
	var out []store.Limit
	for _, a := range []store.Algorithm{store.GCRA, store.TokenBucket, store.FixedWindow, store.SlidingWindow, store.SlidingLog, store.LeakyBucket} {
		penalized := store.Limit{Algorithm: a, Rate: 2, Period: time.Minute, Penalty: 15 * time.Minute}
		if a == store.GCRA || a == store.TokenBucket || a == store.LeakyBucket {
			penalized.Burst = 4
		}
		out = append(out, store.Limit{Algorithm: a, Rate: 3, Period: time.Minute}, penalized)
	}
	return out
}

func TestPlans(t *testing.T) {
	clock := newFakeClock(time.Unix(1_700_000_000, 0))
	var plans []string
	l, err := New(memorystore.New(memorystore.WithClock(clock.Now)),
		"api-internal", headerKey, []store.Limit{store.PerMinute(1)},
		WithPolicyNames(map[string]string{"": "api", "pro": "pro"}),
		WithClock(clock.Now), WithHeaders(HeadersIETF),
		WithPlans(planHeader, map[string][]store.Limit{"free": {store.PerMinute(2)}, "pro": {store.PerMinute(5), store.PerHour(100)}}),
		WithObserver(func(ev Event) { plans = append(plans, ev.Plan) }))
	if err != nil {
		t.Fatal(err)
	}
	admitted := func(client, plan string) (n int, policy string) {
		for i := 0; i < 10; i++ {
			d := l.Decide(clientRequest(client, plan))
			if i == 0 {
				h := http.Header{}
				d.setHeaders(h, nil)
				policy = h.Get("Ratelimit-Policy")
			}
			if d.Action == Serve {
				n++
			}
		}
		return n, policy
	}
	for _, c := range []struct {
		client, plan string
		want         int
		policy       string
	}{
		{"a", "free", 2, `"api";q=2;w=60`}, // no policy name of its own: the Limiter's
		{"b", "pro", 5, `"pro-0";q=5;w=60, "pro-1";q=100;w=3600`},
		{"c", "", 1, `"api";q=1;w=60`},
		{"d", "enterprise", 1, `"api";q=1;w=60`}, // unknown: the Limiter's own limits
	} {
		plans = plans[:0]
		n, policy := admitted(c.client, c.plan)
		if n != c.want || policy != c.policy {
			t.Errorf("plan %q: %d admitted of 10, policy %s; want %d, %s", c.plan, n, policy, c.want, c.policy)
		}
		wantPlan := c.plan
		if c.want == 1 {
			wantPlan = ""
		}
		if plans[0] != wantPlan {
			t.Errorf("plan %q: Event.Plan %q, want %q", c.plan, plans[0], wantPlan)
		}
	}
	// Moving from free to pro: pro's limits have their own state.
	if n, _ := admitted("a", "pro"); n != 5 {
		t.Errorf("client moved from free to pro: %d admitted, want pro's 5", n)
	}
	if got := *l.plans.Load(); len(got) != 2 || len(got["pro"].limits) != 2 {
		t.Errorf("Plans() = %v", got)
	}
}

// A limit shared by two plans keeps its state when a client moves between
// them.
func TestPlansShareIdenticalLimits(t *testing.T) {
	clock := newFakeClock(time.Unix(1_700_000_000, 0))
	daily := store.PerHour(3)
	l, err := New(memorystore.New(memorystore.WithClock(clock.Now)), "test", headerKey, []store.Limit{store.PerMinute(100)}, WithClock(clock.Now),
		WithPlans(planHeader, map[string][]store.Limit{"free": {store.PerMinute(10), daily}, "pro": {store.PerMinute(100), daily}}))
	if err != nil {
		t.Fatal(err)
	}
	served := 0
	for i, plan := range []string{"free", "free", "pro", "pro", "free", "pro"} {
		if d := l.Decide(clientRequest("a", plan)); d.Action == Serve {
			served++
		} else if i < 3 {
			t.Errorf("request %d (%s) refused", i, plan)
		}
	}
	if served != 3 {
		t.Errorf("%d served, want the shared 3/h", served)
	}
}

func TestPlansBadInput(t *testing.T) {
	st := memorystore.New()
	for _, c := range []struct {
		name  string
		opt   Option
		wants []string
	}{
		{"nil plan func", WithPlans(nil, map[string][]store.Limit{"a": {store.PerMinute(1)}}), []string{"plan function is nil"}},
		{"no plans", WithPlans(planHeader, nil), []string{"no plans"}},
		{"empty plan name", WithPlans(planHeader, map[string][]store.Limit{"": {store.PerMinute(1)}}), []string{"plan must be 1 to"}},
		{"bad limit", WithPlans(planHeader, map[string][]store.Limit{"pro": {store.PerMinute(1), {Rate: 0, Period: time.Second}}}), []string{`plan "pro"`, "limit 1"}},
		{"no limits", WithPlans(planHeader, map[string][]store.Limit{"pro": nil}), []string{`plan "pro"`, "no limits"}},
	} {
		_, err := New(st, "test", headerKey, []store.Limit{store.PerMinute(1)}, c.opt)
		if err == nil {
			t.Errorf("%s: New accepted it", c.name)
			continue
		}
		for _, w := range c.wants {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not say %q", c.name, err, w)
			}
		}
	}
	l, _ := New(st, "test", headerKey, []store.Limit{store.PerMinute(1)})
	if err := l.SetPlans(map[string][]store.Limit{"a": {store.PerMinute(1)}}); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("SetPlans without WithPlans: %v", err)
	}
}

// SetPlans keeps unchanged limits' state, guards a tightened one, sends a
// removed plan's requests to the Limiter's own limits, and leaves the
// plans alone on error.
func TestSetPlans(t *testing.T) {
	clock := newFakeClock(time.Unix(1_700_000_000, 0))
	l, err := New(memorystore.New(memorystore.WithClock(clock.Now)), "test", headerKey, []store.Limit{store.PerMinute(1)}, WithClock(clock.Now),
		WithPlans(planHeader, map[string][]store.Limit{"free": {store.PerMinute(3)}, "pro": {store.PerMinute(10)}}))
	if err != nil {
		t.Fatal(err)
	}
	serve := func(client, plan string, n int) int {
		got := 0
		for i := 0; i < n; i++ {
			if l.Decide(clientRequest(client, plan)).Action == Serve {
				got++
			}
		}
		return got
	}
	serve("a", "free", 2)
	serve("b", "pro", 6)
	if err := l.SetPlans(map[string][]store.Limit{"free": {store.PerMinute(3)}, "pro": {store.PerMinute(5)}, "team": {store.PerMinute(2)}}); err != nil {
		t.Fatal(err)
	}
	if got := serve("a", "free", 5); got != 1 {
		t.Errorf("free unchanged: %d more served, want 1 (state kept)", got)
	}
	// The old 10/m, 6 used, stays in force as a guard: 4 more, not 5.
	if got := serve("b", "pro", 6); got != 4 {
		t.Errorf("pro tightened to 5/m after 6 of 10 used: %d served, want 4 (guard)", got)
	}
	if got := serve("c", "team", 5); got != 2 {
		t.Errorf("new plan team: %d served, want 2", got)
	}
	if err := l.SetPlans(map[string][]store.Limit{"team": {{Rate: -1}}}); err == nil {
		t.Error("SetPlans accepted an invalid limit")
	}
	if err := l.SetPlans(map[string][]store.Limit{"team": {store.PerMinute(2)}}); err != nil {
		t.Fatal(err)
	}
	if got := serve("d", "free", 5); got != 1 {
		t.Errorf("removed plan free: %d served, want the Limiter's own 1", got)
	}
}

// Status reports the quota as the last response's headers did (Limit,
// Remaining, Reset), at the same instant, for every algorithm; its Allowed
// and RetryAfter are the next request's; and it changes nothing: no state,
// no observer.
func TestStatusIsTheLastHeaders(t *testing.T) {
	var cases [][]store.Limit
	for _, lim := range controlLimits() {
		cases = append(cases, []store.Limit{lim}, []store.Limit{lim, store.PerHour(5)})
	}
	for _, limits := range cases {
		t.Run(fmt.Sprint(limits), func(t *testing.T) {
			clock := newFakeClock(time.Unix(1_700_000_000, 0))
			events := 0
			l, err := New(memorystore.New(memorystore.WithClock(clock.Now)), "test", headerKey, limits,
				WithClock(clock.Now), WithObserver(func(Event) { events++ }))
			if err != nil {
				t.Fatal(err)
			}
			r := clientRequest("a", "")
			first, err := l.Status(r)
			if err != nil || first.Remaining != first.Limit || !first.Allowed {
				t.Fatalf("Status of a fresh key: %+v, %v; want a full allowance", first, err)
			}
			for i := 0; i < 9; i++ {
				before, err := l.Status(r)
				if err != nil {
					t.Fatal(err)
				}
				d := l.Decide(r)
				if events != i+1 {
					t.Fatalf("Status was observed: %d events after %d decisions", events, i+1)
				}
				if before.Allowed != d.Result.Allowed || before.RetryAfter != d.Result.RetryAfter {
					t.Fatalf("request %d: Status said allowed %v, retry %v; the request got %+v", i, before.Allowed, before.RetryAfter, d.Result)
				}
				if d.Result.Allowed && d.Result.Remaining != before.Remaining-1 {
					t.Fatalf("request %d: Status said %d remaining before it, the request left %d", i, before.Remaining, d.Result.Remaining)
				}
				after, err := l.Status(r)
				if err != nil {
					t.Fatal(err)
				}
				got, want := http.Header{}, http.Header{}
				d.setHeaders(want, nil)
				now := clock.Now()
				peeked := Decision{Result: after, l: d.l, nowSec: now.Unix(), nowNsec: int32(now.Nanosecond())}
				peeked.setHeaders(got, nil)
				for _, h := range []string{"X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset"} {
					// Limits tied at 0 after an allowed request: the header
					// named the first, Status names the one that refuses
					// longest, as the next (refused) response will.
					tied := len(limits) > 1 && d.Result.Allowed && !after.Allowed && h != "X-Ratelimit-Remaining"
					if got.Get(h) != want.Get(h) && !tied {
						t.Fatalf("request %d: after it Status gives %s %q, the response said %q (Status %+v)", i, h, got.Get(h), want.Get(h), after)
					}
				}
				if at := after.ResetAt(clock.Now()).Unix(); strconv.FormatInt(at, 10) != got.Get("X-Ratelimit-Reset") {
					t.Fatalf("request %d: ResetAt %d, header %s", i, at, want.Get("X-Ratelimit-Reset"))
				}
				clock.Advance(7 * time.Second)
			}
		})
	}
}

func TestStatusByRequestAndErrors(t *testing.T) {
	clock := newFakeClock(time.Unix(1_700_000_000, 0))
	l, err := New(memorystore.New(memorystore.WithClock(clock.Now)), "test", headerKey, []store.Limit{store.PerMinute(3)}, WithClock(clock.Now),
		WithPlans(planHeader, map[string][]store.Limit{"pro": {store.PerMinute(10)}}),
		WithSkip(func(r *http.Request) bool { return r.URL.Path == "/health" }))
	if err != nil {
		t.Fatal(err)
	}
	l.Decide(clientRequest("a", "pro"))
	// An administrator's request carrying the client's key and plan.
	if res, err := l.Status(clientRequest("a", "pro")); err != nil || res.Remaining != 9 || res.Limit != 10 || !res.Allowed {
		t.Errorf("Status(a, pro) = %+v, %v; want limit 10, 9 remaining, allowed", res, err)
	}
	if res, err := l.Status(clientRequest("a", "")); err != nil || res.Remaining != 3 || res.Limit != 3 || !res.Allowed {
		t.Errorf("Status(a, \"\") = %+v, %v; want limit 3, 3 remaining, allowed", res, err)
	}
	if _, err := l.Status(clientRequest("", "")); !errors.Is(err, ErrNoKey) {
		t.Errorf("Status without a key: %v", err)
	}
	if res, err := l.Status(httptest.NewRequest(http.MethodGet, "/health", nil)); err != nil || res.Limit != 0 {
		t.Errorf("Status of a skipped request: %+v, %v; want the zero Result", res, err)
	}
	plain, _ := New(&scriptStore{}, "test", headerKey, []store.Limit{store.PerMinute(3)})
	if _, err := plain.Status(clientRequest("a", "")); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("Status on a store without Peek: %v", err)
	}
	if err := plain.Reset(context.Background(), "a"); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("Reset on a store without Reset: %v", err)
	}
}

// Reset gives an exhausted and locked client a fresh allowance under every
// limit of every plan, and touches no other client.
func TestReset(t *testing.T) {
	clock := newFakeClock(time.Unix(1_700_000_000, 0))
	limits := controlLimits()
	l, err := New(memorystore.New(memorystore.WithClock(clock.Now)), "test", headerKey, limits[:2], WithClock(clock.Now),
		WithPlans(planHeader, map[string][]store.Limit{"all": limits}))
	if err != nil {
		t.Fatal(err)
	}
	for _, client := range []string{"a", "b"} {
		for _, plan := range []string{"", "all"} {
			for i := 0; i < 10; i++ {
				l.Decide(clientRequest(client, plan))
			}
		}
	}
	if err := l.Reset(context.Background(), "a"); err != nil {
		t.Fatal(err)
	}
	for _, plan := range []string{"", "all"} {
		if d := l.Decide(clientRequest("a", plan)); d.Action != Serve {
			t.Errorf("plan %q after Reset: %v %+v", plan, d.Outcome, d.Result)
		}
		if d := l.Decide(clientRequest("b", plan)); d.Action != Refuse {
			t.Errorf("plan %q, another client: %v %+v, want still refused", plan, d.Outcome, d.Result)
		}
	}
	if err := l.Reset(context.Background(), ""); !errors.Is(err, store.ErrEmptyKey) {
		t.Errorf("Reset(\"\"): %v", err)
	}
}

// Event.Limit is the limit that bound each decision, and Event.Plan the
// plan that decided.
func TestEventNamesBindingLimitAndPlan(t *testing.T) {
	clock := newFakeClock(time.Unix(1_700_000_000, 0))
	perSecond, perHour := store.PerSecond(10), store.PerHour(3)
	var got []Event
	l, err := New(memorystore.New(memorystore.WithClock(clock.Now)), "test", headerKey, []store.Limit{store.PerMinute(1)}, WithClock(clock.Now),
		WithPlans(planHeader, map[string][]store.Limit{"pro": {perSecond, perHour}}),
		WithObserver(func(ev Event) { got = append(got, ev) }))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 4; i++ {
		l.Decide(clientRequest("a", "pro"))
	}
	l.Decide(clientRequest("b", ""))
	want := []store.Limit{perHour, perHour, perHour, perHour, store.PerMinute(1)} // the least remaining, then the denying one
	for i, ev := range got {
		if ev.Limit != want[i] || (i < 4) != (ev.Plan == "pro") {
			t.Errorf("decision %d: Event.Limit %v, Plan %q; want %v", i, ev.Limit, ev.Plan, want[i])
		}
	}
}

// A Reset that matched no state says so, and one that cleared something
// does not.
func TestResetNothingIsAnError(t *testing.T) {
	l, err := New(memorystore.New(), "api", headerKey, controlLimits()[:2])
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := l.Reset(ctx, "nobody"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Reset of a key with no state: %v, want ErrNotFound", err)
	}
	l.Decide(clientRequest("a", ""))
	if err := l.Reset(ctx, "a"); err != nil {
		t.Errorf("Reset of a key with state: %v", err)
	}
	if err := l.Reset(ctx, "a"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("second Reset: %v, want ErrNotFound", err)
	}
	if err := l.Reset(ctx, ""); !errors.Is(err, store.ErrEmptyKey) {
		t.Errorf("Reset of an empty key: %v, want ErrEmptyKey", err)
	}
}

// downStore is a store that is down: Take and Reset fail.
type downStore struct{ partial.Store }

func (downStore) Take(context.Context, string, int64, ...store.Spec) (store.Result, error) {
	return store.Result{}, errStoreDown
}
func (downStore) Reset(context.Context, string, ...store.Spec) error { return errStoreDown }

// With the store down, Reset clears the local fallback store, which is
// what refuses the client meanwhile, and returns the store's error.
func TestResetStoreDownClearsFallback(t *testing.T) {
	l, err := New(withLocal(downStore{}, memorystore.New()), "test", headerKey, []store.Limit{store.PerHour(1)})
	if err != nil {
		t.Fatal(err)
	}
	l.Decide(clientRequest("a", ""))
	if d := l.Decide(clientRequest("a", "")); d.Action != Refuse || d.Outcome != OutcomeFallback {
		t.Fatalf("second request: %v %v, want refused by the fallback", d.Action, d.Outcome)
	}
	if err := l.Reset(context.Background(), "a"); !errors.Is(err, errStoreDown) {
		t.Errorf("Reset with the store down: %v, want the store's error", err)
	}
	if d := l.Decide(clientRequest("a", "")); d.Action != Serve {
		t.Errorf("after Reset: %v %v, want served (the fallback cleared)", d.Action, d.Outcome)
	}
}
