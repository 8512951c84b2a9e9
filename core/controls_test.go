package core

import (
	"context"
	"errors"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/store"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
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
func controlLimits() []Limit {
	var out []Limit
	for _, a := range []Algorithm{GCRA, TokenBucket, FixedWindow, SlidingWindow, SlidingLog, LeakyBucket} {
		penalized := Limit{Algorithm: a, Rate: 2, Period: time.Minute, Penalty: 15 * time.Minute}
		if a == GCRA || a == TokenBucket || a == LeakyBucket {
			penalized.Burst = 4
		}
		out = append(out, Limit{Algorithm: a, Rate: 3, Period: time.Minute}, penalized)
	}
	return out
}

func TestPlans(t *testing.T) {
	clock := newFakeClock(time.Unix(1_700_000_000, 0))
	var plans []string
	l, err := New(memorystore.New(memorystore.WithClock(clock.Now)), headerKey, []Limit{PerMinute(1)},
		WithName("api-internal"), WithPolicyName("api"), WithPlanPolicyNames(map[string]string{"pro": "pro"}),
		WithClock(clock.Now), WithHeaders(HeadersIETF),
		WithPlans(planHeader, map[string][]Limit{"free": {PerMinute(2)}, "pro": {PerMinute(5), PerHour(100)}}),
		WithObserver(func(ev Event) { plans = append(plans, ev.Plan) }))
	if err != nil {
		t.Fatal(err)
	}
	admitted := func(client, plan string) (n int, policy string) {
		for i := 0; i < 10; i++ {
			d := l.Decide(clientRequest(client, plan))
			if i == 0 {
				h := http.Header{}
				d.SetHeaders(h)
				policy = h.Get(HeaderRateLimitPolicy)
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
	if got := l.Plans(); len(got) != 2 || len(got["pro"]) != 2 {
		t.Errorf("Plans() = %v", got)
	}
}

// A limit shared by two plans keeps its state when a client moves between
// them.
func TestPlansShareIdenticalLimits(t *testing.T) {
	clock := newFakeClock(time.Unix(1_700_000_000, 0))
	daily := PerHour(3)
	l, err := New(memorystore.New(memorystore.WithClock(clock.Now)), headerKey, []Limit{PerMinute(100)}, WithClock(clock.Now),
		WithPlans(planHeader, map[string][]Limit{"free": {PerMinute(10), daily}, "pro": {PerMinute(100), daily}}))
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
	store := memorystore.New()
	for _, c := range []struct {
		name  string
		opt   Option
		wants []string
	}{
		{"nil plan func", WithPlans(nil, map[string][]Limit{"a": {PerMinute(1)}}), []string{"plan function is nil"}},
		{"no plans", WithPlans(planHeader, nil), []string{"no plans"}},
		{"empty plan name", WithPlans(planHeader, map[string][]Limit{"": {PerMinute(1)}}), []string{"plan must be 1 to"}},
		{"bad limit", WithPlans(planHeader, map[string][]Limit{"pro": {PerMinute(1), {Rate: 0, Period: time.Second}}}), []string{`plan "pro"`, "limit 1"}},
		{"no limits", WithPlans(planHeader, map[string][]Limit{"pro": nil}), []string{`plan "pro"`, "no limits"}},
	} {
		_, err := New(store, headerKey, []Limit{PerMinute(1)}, c.opt)
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
	l, _ := New(store, headerKey, []Limit{PerMinute(1)})
	if err := l.SetPlans(map[string][]Limit{"a": {PerMinute(1)}}); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("SetPlans without WithPlans: %v", err)
	}
}

// SetPlans keeps unchanged limits' state, guards a tightened one, sends a
// removed plan's requests to the Limiter's own limits, and leaves the
// plans alone on error.
func TestSetPlans(t *testing.T) {
	clock := newFakeClock(time.Unix(1_700_000_000, 0))
	l, err := New(memorystore.New(memorystore.WithClock(clock.Now)), headerKey, []Limit{PerMinute(1)}, WithClock(clock.Now),
		WithPlans(planHeader, map[string][]Limit{"free": {PerMinute(3)}, "pro": {PerMinute(10)}}))
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
	if err := l.SetPlans(map[string][]Limit{"free": {PerMinute(3)}, "pro": {PerMinute(5)}, "team": {PerMinute(2)}}); err != nil {
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
	if err := l.SetPlans(map[string][]Limit{"team": {{Rate: -1}}}); err == nil {
		t.Error("SetPlans accepted an invalid limit")
	}
	if err := l.SetPlans(map[string][]Limit{"team": {PerMinute(2)}}); err != nil {
		t.Fatal(err)
	}
	if got := serve("d", "free", 5); got != 1 {
		t.Errorf("removed plan free: %d served, want the Limiter's own 1", got)
	}
}

// Status says exactly what the next request gets, for every algorithm,
// before and after requests, and changes nothing: no state, no observer.
func TestStatusIsTheNextDecision(t *testing.T) {
	for _, lim := range controlLimits() {
		t.Run(lim.String(), func(t *testing.T) {
			clock := newFakeClock(time.Unix(1_700_000_000, 0))
			events := 0
			l, err := New(memorystore.New(memorystore.WithClock(clock.Now)), headerKey, []Limit{lim, PerHour(5)},
				WithClock(clock.Now), WithObserver(func(Event) { events++ }))
			if err != nil {
				t.Fatal(err)
			}
			r := clientRequest("a", "")
			for i := 0; i < 9; i++ {
				before, err := l.Status(r)
				if err != nil {
					t.Fatal(err)
				}
				again, _ := l.Status(r)
				if events != i {
					t.Fatalf("Status was observed: %d events after %d decisions", events, i)
				}
				d := l.Decide(r)
				if !sameResult(before, d.Result) || !sameResult(again, before) {
					t.Fatalf("request %d: Status %+v (then %+v), the request got %+v", i, before, again, d.Result)
				}
				clock.Advance(7 * time.Second)
			}
		})
	}
}

func sameResult(a, b Result) bool {
	if len(a.PerLimit) != len(b.PerLimit) {
		return false
	}
	for i := range a.PerLimit {
		if !sameResult(a.PerLimit[i], b.PerLimit[i]) {
			return false
		}
	}
	return a.Allowed == b.Allowed && a.Limit == b.Limit && a.Remaining == b.Remaining &&
		a.RetryAfter == b.RetryAfter && a.ResetAfter == b.ResetAfter && a.Delay == b.Delay && a.Binding == b.Binding
}

func TestStatusOfAndErrors(t *testing.T) {
	clock := newFakeClock(time.Unix(1_700_000_000, 0))
	l, err := New(memorystore.New(memorystore.WithClock(clock.Now)), headerKey, []Limit{PerMinute(3)}, WithClock(clock.Now),
		WithPlans(planHeader, map[string][]Limit{"pro": {PerMinute(10)}}),
		WithSkip(func(r *http.Request) bool { return r.URL.Path == "/health" }))
	if err != nil {
		t.Fatal(err)
	}
	l.Decide(clientRequest("a", "pro"))
	ctx := context.Background()
	if res, err := l.StatusOf(ctx, "a", "pro"); err != nil || res.Remaining != 8 || res.Limit != 10 {
		t.Errorf("StatusOf(a, pro) = %+v, %v; want limit 10, 8 remaining after the next", res, err)
	}
	if res, err := l.StatusOf(ctx, "a", ""); err != nil || res.Remaining != 2 || res.Limit != 3 {
		t.Errorf("StatusOf(a, \"\") = %+v, %v; want limit 3, 2 remaining after the next", res, err)
	}
	if _, err := l.StatusOf(ctx, "", ""); !errors.Is(err, store.ErrEmptyKey) {
		t.Errorf("StatusOf empty key: %v", err)
	}
	if _, err := l.Status(clientRequest("", "")); !errors.Is(err, ErrNoKey) {
		t.Errorf("Status without a key: %v", err)
	}
	if res, err := l.Status(httptest.NewRequest(http.MethodGet, "/health", nil)); err != nil || res.Limit != 0 {
		t.Errorf("Status of a skipped request: %+v, %v; want the zero Result", res, err)
	}
	plain, _ := New(&scriptStore{}, headerKey, []Limit{PerMinute(3)})
	if _, err := plain.Status(clientRequest("a", "")); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("Status on a store without Peek: %v", err)
	}
	if err := plain.Reset(ctx, "a"); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("Reset on a store without Reset: %v", err)
	}
}

// Reset gives an exhausted and locked client a fresh allowance under every
// limit of every plan, and touches no other client.
func TestReset(t *testing.T) {
	clock := newFakeClock(time.Unix(1_700_000_000, 0))
	limits := controlLimits()
	l, err := New(memorystore.New(memorystore.WithClock(clock.Now)), headerKey, limits[:2], WithClock(clock.Now),
		WithPlans(planHeader, map[string][]Limit{"all": limits}))
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
	perSecond, perHour := PerSecond(10), PerHour(3)
	var got []Event
	l, err := New(memorystore.New(memorystore.WithClock(clock.Now)), headerKey, []Limit{PerMinute(1)}, WithClock(clock.Now),
		WithPlans(planHeader, map[string][]Limit{"pro": {perSecond, perHour}}),
		WithObserver(func(ev Event) { got = append(got, ev) }))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 4; i++ {
		l.Decide(clientRequest("a", "pro"))
	}
	l.Decide(clientRequest("b", ""))
	want := []Limit{perHour, perHour, perHour, perHour, PerMinute(1)} // the least remaining, then the denying one
	for i, ev := range got {
		if ev.Limit != want[i] || (i < 4) != (ev.Plan == "pro") {
			t.Errorf("decision %d: Event.Limit %v, Plan %q; want %v", i, ev.Limit, ev.Plan, want[i])
		}
	}
}
