package core

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/store"
)

// These tests run the Limiter on the real memorystore.Store with a fake clock
// shared by both, so every figure is computed from ALGORITHMS.md.

var t0 = time.Unix(1_700_000_000, 0)

func memoryLimiter(t *testing.T, clock *fakeClock, limits []store.Limit, opts ...Option) *Limiter {
	t.Helper()
	st := memorystore.New(memorystore.WithClock(clock.Now))
	return mustNew(t, st, limits, append(opts, WithClock(clock.Now))...)
}

func decideHeaders(l *Limiter, r *http.Request) (Decision, http.Header) {
	d := l.Decide(r)
	h := http.Header{}
	d.setHeaders(h, nil)
	return d, h
}

func TestMemoryGCRAHeaders(t *testing.T) {
	clock := newFakeClock(t0)
	l := memoryLimiter(t, clock, []store.Limit{store.PerSecond(2)}, withName("m"))
	// GCRA R=2 P=1s B=2: T=500ms, dvt=1s.
	type step struct {
		action                       Action
		remaining, reset, retryAfter string
	}
	steps := []step{
		{Serve, "1", "1700000001", ""},   // used 500ms → reset t0+0.5s, rounded up
		{Serve, "0", "1700000001", ""},   // used 1s
		{Refuse, "0", "1700000001", "1"}, // retry = 1.5s - 1s = 500ms → 1
	}
	for i, s := range steps {
		d, h := decideHeaders(l, request("a"))
		if d.Action != s.action || h.Get("X-Ratelimit-Limit") != "2" || h.Get("X-Ratelimit-Remaining") != s.remaining ||
			h.Get("X-Ratelimit-Reset") != s.reset || h.Get("Retry-After") != s.retryAfter {
			t.Fatalf("request %d: %v %v, want %+v", i+1, d.Action, h, s)
		}
	}
	// 500ms later one request has leaked out.
	clock.Advance(500 * time.Millisecond)
	d, h := decideHeaders(l, request("a"))
	if d.Action != Serve || h.Get("X-Ratelimit-Remaining") != "0" || h.Get("X-Ratelimit-Reset") != "1700000002" { // t0+0.5s + 1s = ...001.5 → ...002
		t.Fatalf("after 500ms: %v %v", d.Action, h)
	}
	// Another client is untouched.
	if d, h := decideHeaders(l, request("b")); d.Action != Serve || h.Get("X-Ratelimit-Remaining") != "1" {
		t.Fatalf("client b: %v %v", d.Action, h)
	}
}

func TestMemoryRetryAfterRoundsUp(t *testing.T) {
	clock := newFakeClock(t0)
	// GCRA 1 per 2.5s, B=1: the second request waits 2.5s → Retry-After 3.
	l := memoryLimiter(t, clock, []store.Limit{{Rate: 1, Period: 2500 * time.Millisecond, Burst: 1}})
	decideHeaders(l, request("a"))
	d, h := decideHeaders(l, request("a"))
	if d.Action != Refuse || h.Get("Retry-After") != "3" {
		t.Fatalf("%v %v, want refuse with Retry-After 3", d.Action, h)
	}
	// 2.4999s later: 1µs left to wait, still announced as 1 second, never 0.
	clock.Advance(2500*time.Millisecond - time.Microsecond)
	d, h = decideHeaders(l, request("a"))
	if d.Action != Refuse || h.Get("Retry-After") != "1" {
		t.Fatalf("%v %v, want refuse with Retry-After 1", d.Action, h)
	}
	clock.Advance(time.Microsecond)
	if d, _ := decideHeaders(l, request("a")); d.Action != Serve {
		t.Fatalf("after the wait: %v", d.Action)
	}
}

func TestMemoryNamesSeparateState(t *testing.T) {
	clock := newFakeClock(t0)
	st := memorystore.New(memorystore.WithClock(clock.Now))
	limits := []store.Limit{store.PerMinute(1)}
	a := mustNew(t, st, limits, withName("a"), WithClock(clock.Now))
	b := mustNew(t, st, limits, withName("b"), WithClock(clock.Now))
	a2 := mustNew(t, st, limits, withName("a"), WithClock(clock.Now))
	if d := a.Decide(request("x")); d.Action != Serve {
		t.Fatalf("a first: %v", d.Action)
	}
	if d := a.Decide(request("x")); d.Action != Refuse {
		t.Fatalf("a second: %v, want refuse", d.Action)
	}
	if d := b.Decide(request("x")); d.Action != Serve {
		t.Fatalf("b shares a's state: %v", d.Action)
	}
	if d := a2.Decide(request("x")); d.Action != Refuse {
		t.Fatalf("a second limiter named a does not share a's state: %v", d.Action)
	}
}

// Requests without a key from one address never spend the allowance of
// another address's (issue 20: 25 forged tokens from one client got the
// next anonymous client denied), and no real key reaches their buckets.
func TestMemoryKeyErrorPerAddress(t *testing.T) {
	clock := newFakeClock(t0)
	l := memoryLimiter(t, clock, []store.Limit{store.PerMinute(2)}, withName("anon"))
	from := func(remote string) *http.Request {
		r := request("")
		r.RemoteAddr = remote
		return r
	}
	for i := range 60 {
		want := Serve
		if i >= 2 {
			want = Refuse
		}
		if d := l.Decide(from("198.51.100.1:4000")); d.Action != want {
			t.Fatalf("request %d without a key from one address: %v, want %v", i, d.Action, want)
		}
	}
	for _, other := range []string{"198.51.100.2:4000", "[2001:db8:0:100::1]:443", ""} {
		if d := l.Decide(from(other)); d.Action != Serve || d.Outcome != OutcomeAllowed {
			t.Fatalf("first request without a key from %q: %v/%v, want serve/allowed", other, d.Action, d.Outcome)
		}
	}
	// The same /56 is the same bucket.
	l.Decide(from("[2001:db8:0:1ff::2]:443"))
	if d := l.Decide(from("[2001:db8:0:180::3]:443")); d.Action != Refuse {
		t.Fatalf("third request without a key from one /56: %v, want refuse", d.Action)
	}
	for _, k := range []string{"anon", ":", "4:anon:", "4:anon!p:198.51.100.1", "!p:198.51.100.1", "p:198.51.100.1"} {
		if d := l.Decide(request(k)); d.Action != Serve {
			t.Fatalf("key %q limited by a bucket of requests without a key: %v", k, d.Action)
		}
	}
}

func TestMemoryCostAndSeveralLimits(t *testing.T) {
	clock := newFakeClock(t0)
	l := memoryLimiter(t, clock, []store.Limit{store.PerSecond(3), store.PerMinute(4)}, WithCost(func(*http.Request) int64 { return 2 }), WithHeaders(HeadersLegacy|HeadersIETF), withName("c"), WithPolicyNames(map[string]string{"": "c"}))
	d, h := decideHeaders(l, request("a"))
	// Per second: 3-2 = 1 left, its next unit in 333334µs → 1; per
	// minute: 4-2 = 2 left, full in 2·15s, its next unit in 15s (t).
	if d.Action != Serve || h.Get("RateLimit") != `"c-0";r=1;t=1, "c-1";r=2;t=15` ||
		h.Get("RateLimit-Policy") != `"c-0";q=3;w=1, "c-1";q=4;w=60` || h.Get("X-Ratelimit-Remaining") != "1" {
		t.Fatalf("first: %v %v", d.Action, h)
	}
	d, h = decideHeaders(l, request("a"))
	if d.Action != Refuse || h.Get("Retry-After") != "1" {
		t.Fatalf("second (cost 2 > 1 left): %v %v", d.Action, h)
	}
	clock.Advance(time.Second)
	// The per-second limit is full again; the per-minute one has 2 left.
	d, h = decideHeaders(l, request("a"))
	// Per minute: 4 used, full in 59s, its next unit in 59s - 3·15s.
	if d.Action != Serve || h.Get("RateLimit") != `"c-0";r=1;t=1, "c-1";r=0;t=14` {
		t.Fatalf("after 1s: %v %v", d.Action, h)
	}
	d, h = decideHeaders(l, request("a"))
	// Denied by the minute limit: 4 used, the next 2 units in 2·15s minus 1s elapsed.
	if d.Action != Refuse || d.Result.Binding != 1 || h.Get("Retry-After") != "29" {
		t.Fatalf("minute limit: %v binding %d %v", d.Action, d.Result.Binding, h)
	}
}

func TestMemoryLeakyBucketHold(t *testing.T) {
	clock := newFakeClock(t0)
	// T = 100ms, queue of 2 behind the one in service.
	l := memoryLimiter(t, clock, []store.Limit{{Algorithm: store.LeakyBucket, Rate: 10, Period: time.Second, Burst: 2}})
	want := []struct {
		action Action
		delay  time.Duration
	}{{Serve, 0}, {Hold, 100 * time.Millisecond}, {Hold, 200 * time.Millisecond}, {Refuse, 0}}
	for i, w := range want {
		d := l.Decide(request("a"))
		if d.Action != w.action || d.Delay != w.delay {
			t.Fatalf("request %d: %v %v, want %v %v", i+1, d.Action, d.Delay, w.action, w.delay)
		}
	}
}

func TestMemoryFallback(t *testing.T) {
	clock := newFakeClock(t0)
	local := memorystore.New(memorystore.WithClock(clock.Now))
	l := mustNew(t, withLocal(&scriptStore{take: failingTake}, local), []store.Limit{store.PerSecond(2)}, WithClock(clock.Now))
	for i, want := range []Action{Serve, Serve, Refuse} {
		d, h := decideHeaders(l, request("a"))
		if d.Action != want || d.Outcome != OutcomeFallback || h.Get("X-Ratelimit-Limit") != "2" {
			t.Fatalf("request %d: %v/%v %v, want %v/fallback with headers", i+1, d.Action, d.Outcome, h, want)
		}
	}
	// A store without a local fallback: FailLocal serves, failed open.
	l = mustNew(t, &scriptStore{take: failingTake}, []store.Limit{store.PerMinute(2)})
	if d := l.Decide(request("a")); d.Action != Serve || d.Outcome != OutcomeFailedOpen {
		t.Fatalf("no local fallback: %v/%v, want serve/failed_open", d.Action, d.Outcome)
	}
}

func TestDecideAllocs(t *testing.T) {
	clock := newFakeClock(t0)
	l := memoryLimiter(t, clock, []store.Limit{store.PerSecond(1_000_000)}, withName("bench"))
	r := request("client-1")
	h := http.Header{}
	l.Decide(r) // create the state
	allocs := testing.AllocsPerRun(500, func() {
		d := l.Decide(r)
		d.setHeaders(h, nil)
	})
	// The header values (their bytes and their slices, in one block); the
	// store key (name + key) is built on the stack, and the memory store
	// allocates nothing for a key it knows.
	if allocs > 1 {
		t.Errorf("Decide+SetHeaders made %v allocations, want ≤ 1", allocs)
	}
}

func BenchmarkDecide(b *testing.B) {
	l, err := New(memorystore.New(), "bench", keyFromHeader, []store.Limit{store.PerHour(1_000_000_000)})
	if err != nil {
		b.Fatal(err)
	}
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.Header.Set("X-Client", "client-1")
	h := http.Header{}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		d := l.Decide(r)
		d.setHeaders(h, nil)
	}
}
