package core

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/core/storetest"
)

// ietfFields parses a response's RateLimit-Policy and RateLimit fields
// (draft-ietf-httpapi-ratelimit-headers-11) and checks that they name the
// same policies, in order.
func ietfFields(t *testing.T, h http.Header) (policy, rl []sfItem) {
	t.Helper()
	policy, err := parseSFList(h.Get("RateLimit-Policy"))
	if err != nil {
		t.Fatalf("RateLimit-Policy %q: %v", h.Get("RateLimit-Policy"), err)
	}
	rl, err = parseSFList(h.Get("RateLimit"))
	if err != nil {
		t.Fatalf("RateLimit %q: %v", h.Get("RateLimit"), err)
	}
	if len(policy) != len(rl) {
		t.Fatalf("%d policies, %d RateLimit members", len(policy), len(rl))
	}
	for i := range policy {
		if policy[i].value != rl[i].value {
			t.Fatalf("member %d: policy %q, RateLimit %q", i, policy[i].value, rl[i].value)
		}
	}
	return policy, rl
}

func headerInt(t *testing.T, h http.Header, name string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(h.Get(name), 10, 64)
	if err != nil {
		t.Fatalf("%s %q: %v", name, h.Get(name), err)
	}
	return n
}

// TestIETFEffectiveWindowEveryAlgorithm runs each algorithm on the memory
// store and a fake clock, through the Limiter, until a request is refused,
// and checks the draft -11 fields of every response: the syntax, r equal
// to X-RateLimit-Remaining, and t the effective window: the seconds until
// the next unit comes back (refill algorithms), the window's end (fixed
// window), never later than Retry-After on a refusal (issue 31: GCRA and
// the token bucket refused with t=10 and Retry-After 2, the sliding window
// with t=12 and Retry-After 4). The clock starts 3 s into a 10 s window.
func TestIETFEffectiveWindowEveryAlgorithm(t *testing.T) {
	const P = 10 * time.Second
	for _, tc := range []struct {
		lim store.Limit
		// served is how many requests of cost 1 pass at once; t their t,
		// each; refusedT the t and retry the Retry-After of the next one.
		served         int
		t              []int64
		refusedT       int64
		retry          int64
		q, w           int64
		advance        time.Duration // then, after advancing the clock this much,
		afterR, afterT int64         // one request of cost 0 sees r and t
	}{
		// 5/10s: T = 2 s. The k-th request leaves the key full in 2k s,
		// its next unit in 2 s. After the 5th, the case: t=2 and
		// Retry-After 2. 1.5 s later a unit is back in 0.5 s.
		{lim: store.Limit{Algorithm: store.GCRA, Rate: 5, Period: P}, served: 5, t: []int64{2, 2, 2, 2, 2}, refusedT: 2, retry: 2, q: 5, w: 10,
			advance: 1500 * time.Millisecond, afterR: 0, afterT: 1},
		{lim: store.Limit{Algorithm: store.TokenBucket, Rate: 5, Period: P}, served: 5, t: []int64{2, 2, 2, 2, 2}, refusedT: 2, retry: 2, q: 5, w: 10,
			advance: 2500 * time.Millisecond, afterR: 1, afterT: 2},
		// Capacity 5 (a queue of 4 and one in service), held requests.
		{lim: store.Limit{Algorithm: store.LeakyBucket, Rate: 5, Period: P, Burst: 4}, served: 5, t: []int64{2, 2, 2, 2, 2}, refusedT: 2, retry: 2, q: 5, w: 10,
			advance: 3 * time.Second, afterR: 1, afterT: 1},
		// The window ends 7 s after the clock's start.
		{lim: store.Limit{Algorithm: store.FixedWindow, Rate: 5, Period: P}, served: 5, t: []int64{7, 7, 7, 7, 7}, refusedT: 7, retry: 7, q: 5, w: 10,
			advance: 7 * time.Second, afterR: 5, afterT: 0},
		// The sliding window: full again 2P-e = 17 s after; the refused
		// request may pass once the previous window's weight has fallen to
		// 4/5: 7 s + 2 s.
		{lim: store.Limit{Algorithm: store.SlidingWindow, Rate: 5, Period: P}, served: 5, t: []int64{17, 17, 17, 17, 17}, refusedT: 9, retry: 9, q: 5, w: 10,
			advance: 9 * time.Second, afterR: 1, afterT: 8},
		// The sliding log: every unit leaves 10 s after it came.
		{lim: store.Limit{Algorithm: store.SlidingLog, Rate: 5, Period: P}, served: 5, t: []int64{10, 10, 10, 10, 10}, refusedT: 10, retry: 10, q: 5, w: 10,
			advance: 10 * time.Second, afterR: 5, afterT: 0},
	} {
		t.Run(string(tc.lim.Algorithm), func(t *testing.T) {
			clock := newFakeClock(t0.Add(3 * time.Second))
			var cost int64 = 1
			l := memoryLimiter(t, clock, []store.Limit{tc.lim}, WithHeaders(HeadersLegacy|HeadersIETF),
				WithCost(func(*http.Request) int64 { return cost }))
			check := func(i int, d Decision, h http.Header) (r, tt int64) {
				t.Helper()
				policy, rl := ietfFields(t, h)
				if len(policy) != 1 || policy[0].value != "default" || policy[0].params["q"] != tc.q ||
					policy[0].params["w"] != tc.w || len(policy[0].params) != 2 || len(policy[0].sparams) != 0 {
					t.Fatalf("request %d: RateLimit-Policy %q, want q=%d w=%d", i, h.Get("RateLimit-Policy"), tc.q, tc.w)
				}
				r, tt = rl[0].params["r"], rl[0].params["t"]
				if _, ok := rl[0].params["t"]; !ok || len(rl[0].params) != 2 {
					t.Fatalf("request %d: RateLimit %q, want r and t", i, h.Get("RateLimit"))
				}
				if r != headerInt(t, h, "X-Ratelimit-Remaining") {
					t.Errorf("request %d: r=%d, X-RateLimit-Remaining %s", i, r, h.Get("X-Ratelimit-Remaining"))
				}
				if d.Action == Refuse && tt > headerInt(t, h, "Retry-After") {
					t.Errorf("request %d refused: t=%d later than Retry-After %s", i, tt, h.Get("Retry-After"))
				}
				return r, tt
			}
			for i := 0; i < tc.served; i++ {
				d, h := decideHeaders(l, request("a"))
				if d.Action == Refuse {
					t.Fatalf("request %d refused: %v", i, h)
				}
				if r, tt := check(i, d, h); r != int64(tc.served-1-i) || tt != tc.t[i] {
					t.Errorf("request %d: r=%d t=%d, want r=%d t=%d", i, r, tt, tc.served-1-i, tc.t[i])
				}
			}
			d, h := decideHeaders(l, request("a"))
			if d.Action != Refuse {
				t.Fatalf("request %d served: %v", tc.served, h)
			}
			if r, tt := check(tc.served, d, h); r != 0 || tt != tc.refusedT || headerInt(t, h, "Retry-After") != tc.retry {
				t.Errorf("refused: r=%d t=%d Retry-After %s, want r=0 t=%d Retry-After %d", r, tt, h.Get("Retry-After"), tc.refusedT, tc.retry)
			}
			clock.Advance(tc.advance)
			cost = 0
			d, h = decideHeaders(l, request("a"))
			if r, tt := check(-1, d, h); r != tc.afterR || tt != tc.afterT {
				t.Errorf("%v later: r=%d t=%d, want r=%d t=%d", tc.advance, r, tt, tc.afterR, tc.afterT)
			}
		})
	}
}

// A refusal of a cost larger than what remains: the refusing limit's t is
// when its next unit is back, sooner than Retry-After (when the whole cost
// fits). Under a penalty lock, t stays within Retry-After.
func TestIETFEffectiveWindowCostAndPenalty(t *testing.T) {
	for _, penalty := range []time.Duration{0, 30 * time.Second} {
		clock := newFakeClock(t0)
		var cost int64 = 1
		l := memoryLimiter(t, clock, []store.Limit{{Rate: 5, Period: 10 * time.Second, Penalty: penalty}},
			WithHeaders(HeadersIETF), WithCost(func(*http.Request) int64 { return cost }))
		for i := 0; i < 4; i++ {
			decideHeaders(l, request("a"))
		}
		cost = 3 // 1 left: the next unit in 2 s, three units in 4 s
		d, h := decideHeaders(l, request("a"))
		_, rl := ietfFields(t, h)
		if d.Action != Refuse || rl[0].params["r"] != 1 {
			t.Fatalf("penalty %v: cost 3 with 1 left: %v %v", penalty, d.Action, h)
		}
		if penalty == 0 && (rl[0].params["t"] != 2 || h.Get("Retry-After") != "4") {
			t.Errorf("cost 3 with 1 left: %v, want t=2 and Retry-After 4", h)
		}
		if penalty > 0 && (rl[0].params["t"] > 30 || h.Get("Retry-After") != "30") {
			t.Errorf("cost 3 with 1 left and a penalty: %v, want t at most Retry-After 30", h)
		}
		cost = 1
		for i := 0; penalty > 0 && i < 3; i++ { // locked: refused, charging nothing
			clock.Advance(5 * time.Second)
			d, h = decideHeaders(l, request("a"))
			_, rl = ietfFields(t, h)
			if d.Action != Refuse || rl[0].params["t"] > headerInt(t, h, "Retry-After") {
				t.Fatalf("under the lock: %v %v", d.Action, h)
			}
		}
	}
}

// A refusal by one of several limits: the refusing member's t is within
// Retry-After; the others keep theirs, which may be later (they did not
// refuse: the client may use their r within their t).
func TestIETFSeveralLimitsRefusal(t *testing.T) {
	clock := newFakeClock(t0)
	l := memoryLimiter(t, clock, []store.Limit{{Rate: 2, Period: time.Second}, {Algorithm: store.SlidingLog, Rate: 100, Period: time.Hour}},
		WithHeaders(HeadersIETF))
	decideHeaders(l, request("a"))
	decideHeaders(l, request("a"))
	d, h := decideHeaders(l, request("a"))
	_, rl := ietfFields(t, h)
	if d.Action != Refuse || len(rl) != 2 {
		t.Fatalf("%v %v", d.Action, h)
	}
	if rl[0].params["r"] != 0 || rl[0].params["t"] != 1 || h.Get("Retry-After") != "1" {
		t.Errorf("refusing member %v, Retry-After %s", rl[0].params, h.Get("Retry-After"))
	}
	if rl[1].params["r"] != 98 || rl[1].params["t"] != 3600 {
		t.Errorf("other member %v", rl[1].params)
	}
}

// A MaxInFlight limit is a quota of concurrent requests: its policy has
// qu="concurrent-requests" and no window, its member r and no t, also
// beside a rate limit and on a refusal (whose Retry-After is at most 1 s).
func TestIETFInFlightQuotaUnit(t *testing.T) {
	clock := newFakeClock(t0)
	l := memoryLimiter(t, clock, []store.Limit{store.MaxInFlight(2, time.Minute), store.PerMinute(100)},
		WithHeaders(HeadersIETF), WithPolicyNames(map[string]string{"": "api"}))
	for i := 0; i < 3; i++ {
		d, h := decideHeaders(l, request("a"))
		policy, rl := ietfFields(t, h)
		if got := h.Get("RateLimit-Policy"); got != `"api-0";q=2;qu="concurrent-requests", "api-1";q=100;w=60` {
			t.Fatalf("RateLimit-Policy %q", got)
		}
		if policy[0].sparams["qu"] != "concurrent-requests" || len(policy[1].sparams) != 0 {
			t.Fatalf("qu: %v %v", policy[0].sparams, policy[1].sparams)
		}
		if _, ok := rl[0].params["t"]; ok || rl[0].params["r"] != int64(max(1-i, 0)) {
			t.Errorf("request %d: in-flight member %v, want r=%d and no t", i, rl[0].params, max(1-i, 0))
		}
		if i == 2 && (d.Action != Refuse || h.Get("Retry-After") != "1") {
			t.Errorf("third request: %v %v, want a refusal with Retry-After 1", d.Action, h)
		}
	}
}

// A calendar window (store.PerCalendar) tells its true renewal: Berlin's
// October 25, 2026 lasts 25 hours (summer time ends), so every header
// counts to 2026-10-25T23:00Z, the next local midnight; the policy's w is
// the nominal day. The next day's window, of 24 hours, starts fresh.
func TestIETFCalendarWindow(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Skip(err)
	}
	start := time.Date(2026, 10, 24, 22, 0, 0, 0, time.UTC) // 00:00 CEST
	end := time.Date(2026, 10, 25, 23, 0, 0, 0, time.UTC)   // 00:00 CET, 25 h later
	clock := storetest.NewClock(start)
	st := memorystore.New(memorystore.WithClock(clock.Now))
	l := mustNew(t, st, []store.Limit{store.PerCalendar(2, "day", berlin)},
		WithClock(clock.Now), WithHeaders(HeadersLegacy|HeadersIETF))
	for i := 0; i < 3; i++ {
		d, h := decideHeaders(l, request("a"))
		policy, rl := ietfFields(t, h)
		if policy[0].params["q"] != 2 || policy[0].params["w"] != 86400 {
			t.Errorf("request %d: RateLimit-Policy %q, want q=2 w=86400", i, h.Get("RateLimit-Policy"))
		}
		if got := headerInt(t, h, "X-Ratelimit-Reset"); got != end.Unix() {
			t.Errorf("request %d: X-RateLimit-Reset %d, want %d (%v)", i, got, end.Unix(), end)
		}
		if rl[0].params["t"] != 25*3600 {
			t.Errorf("request %d: RateLimit %q, want t=90000", i, h.Get("RateLimit"))
		}
		if i < 2 && d.Action == Refuse || i == 2 && (d.Action != Refuse || headerInt(t, h, "Retry-After") != 25*3600) {
			t.Errorf("request %d: %v, Retry-After %q", i, d.Action, h.Get("Retry-After"))
		}
	}
	clock.Advance(end.Sub(clock.Now()))
	d, h := decideHeaders(l, request("a"))
	_, rl := ietfFields(t, h)
	if d.Action == Refuse || rl[0].params["r"] != 1 || rl[0].params["t"] != 24*3600 ||
		headerInt(t, h, "X-Ratelimit-Reset") != end.Add(24*time.Hour).Unix() {
		t.Errorf("the next day: %v %v", d.Action, h)
	}
}
