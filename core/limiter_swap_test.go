package core

import (
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/store"
)

// These tests swap limits on a Limiter over the real memorystore.Store with a fake
// clock; the figures follow ALGORITHMS.md (GCRA unless said otherwise).

func mustParse(t *testing.T, ss ...string) []store.Limit {
	t.Helper()
	out := make([]store.Limit, len(ss))
	for i, s := range ss {
		l, err := store.ParseLimit(s)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = l
	}
	return out
}

func mustSet(t *testing.T, l *Limiter, ss ...string) {
	t.Helper()
	if err := l.SetLimits(mustParse(t, ss...)); err != nil {
		t.Fatal(err)
	}
}

// serveN makes n requests for client and returns how many were served.
func serveN(l *Limiter, client string, n int) int {
	served := 0
	for i := 0; i < n; i++ {
		if l.Decide(request(client)).Action == Serve {
			served++
		}
	}
	return served
}

func TestSetLimitsRejectsInvalid(t *testing.T) {
	clock := newFakeClock(t0)
	l := memoryLimiter(t, clock, mustParse(t, "3/m"))
	serveN(l, "a", 1)
	if err := l.SetLimits(nil); !errors.Is(err, ErrInvalidOption) || !errors.Is(err, store.ErrInvalidLimit) {
		t.Errorf("SetLimits(nil) = %v", err)
	}
	bad := []store.Limit{store.PerSecond(5), {Rate: 10, Period: time.Second, Algorithm: store.FixedWindow, Burst: 3}}
	if err := l.SetLimits(bad); !errors.Is(err, store.ErrInvalidLimit) || !strings.Contains(err.Error(), "limit 1:") {
		t.Errorf("SetLimits(invalid) = %v, want limit 1 named and ErrInvalidLimit", err)
	}
	if got := l.Limits(); len(got) != 1 || got[0] != mustParse(t, "3/m")[0] {
		t.Errorf("limits after failed swaps: %v", got)
	}
	// The state and the limits are those from before: 2 of 3 left.
	if served := serveN(l, "a", 5); served != 2 {
		t.Errorf("after failed swaps served %d, want 2", served)
	}
}

func TestSetLimitsCopiesAndReportsLimits(t *testing.T) {
	l := memoryLimiter(t, newFakeClock(t0), mustParse(t, "3/m"))
	in := mustParse(t, "5/s", "100/h token_bucket")
	if err := l.SetLimits(in); err != nil {
		t.Fatal(err)
	}
	in[0].Rate = 99
	got := l.Limits()
	if len(got) != 2 || got[0].Rate != 5 || got[1].Algorithm != store.TokenBucket {
		t.Fatalf("Limits() = %v", got)
	}
	got[1].Rate = 1
	if l.Limits()[1].Rate != 100 {
		t.Fatal("Limits() shares the Limiter's slice")
	}
}

func TestSetLimitsHeaders(t *testing.T) {
	clock := newFakeClock(t0)
	l := memoryLimiter(t, clock, mustParse(t, "2/s"), withName("api"), WithPolicyNames(map[string]string{"": "api"}), WithHeaders(HeadersLegacy|HeadersIETF))
	before, h := decideHeaders(l, request("a"))
	if h.Get("X-Ratelimit-Limit") != "2" || h.Get("Ratelimit-Policy") != `"api";q=2;w=1` {
		t.Fatalf("before: %v", h)
	}
	mustSet(t, l, "5/m", "100/h burst 10")
	_, h = decideHeaders(l, request("a"))
	if h.Get("X-Ratelimit-Limit") != "5" || h.Get("X-Ratelimit-Remaining") != "4" ||
		h.Get("Ratelimit-Policy") != `"api-0";q=5;w=60, "api-1";q=10;w=360` ||
		h.Get("Ratelimit") != `"api-0";r=4;t=12, "api-1";r=9;t=36` {
		t.Fatalf("after: %v", h)
	}
	// A decision made before the swap keeps the headers of its limits.
	h = http.Header{}
	before.setHeaders(h, nil)
	if h.Get("Ratelimit-Policy") != `"api";q=2;w=1` || h.Get("Ratelimit") != `"api";r=1;t=1` {
		t.Fatalf("decision from before the swap: %v", h)
	}
}

func TestSetLimitsKeepsUnchangedState(t *testing.T) {
	clock := newFakeClock(t0)
	l := memoryLimiter(t, clock, mustParse(t, "3/m", "1000/h fixed_window"))
	if served := serveN(l, "a", 2); served != 2 {
		t.Fatalf("served %d", served)
	}
	// Reordered, written differently (burst 3 is the default), another
	// limit removed and one added: 3/m is the same limit and keeps its state.
	mustSet(t, l, "50/s", "3/m gcra burst 3")
	_, h := decideHeaders(l, request("a"))
	if h.Get("X-Ratelimit-Remaining") != "0" {
		t.Fatalf("3/m after the swap: %v, want the third of 3", h)
	}
	if d := l.Decide(request("a")); d.Action != Refuse || d.Result.RetryAfter != 20*time.Second {
		t.Fatalf("fourth request: %v %+v, want refused for 20s", d.Action, d.Result)
	}
	if g := l.cfg.Load().guards; len(g) != 0 {
		t.Fatalf("guards %v for a swap that changed no limit", g)
	}
	// Back to the first set: 1000/h (in the window that began 800s before
	// t0) kept the count of the 2 requests made before the first swap.
	mustSet(t, l, "3/m", "1000/h fixed_window")
	clock.Advance(20 * time.Second)
	d := l.Decide(request("a"))
	if d.Action != Serve || len(d.Result.PerLimit) != 2 || d.Result.PerLimit[1].Remaining != 997 {
		t.Fatalf("back to the first set: %v %+v, want 1000/h at 997 left", d.Action, d.Result)
	}
}

func TestSetLimitsTightenedKeepsOldLimitAsGuard(t *testing.T) {
	clock := newFakeClock(t0)
	l := memoryLimiter(t, clock, mustParse(t, "10/m"))
	if served := serveN(l, "a", 10); served != 10 {
		t.Fatal(served)
	}
	serveN(l, "b", 3)
	mustSet(t, l, "5/m")
	cfg := l.cfg.Load()
	if len(cfg.guards) != 1 || !cfg.expires.Equal(t0.Add(time.Minute)) {
		t.Fatalf("guards %+v until %v, want 10/m for its horizon B·T = 1m", cfg.guards, cfg.expires)
	}
	// a used 10/m up: refused, with the new limit's figures and the old
	// limit's wait (one emission interval of 10/m: 6s).
	d, h := decideHeaders(l, request("a"))
	if d.Action != Refuse || h.Get("X-Ratelimit-Limit") != "5" || h.Get("X-Ratelimit-Remaining") != "0" || h.Get("Retry-After") != "6" {
		t.Fatalf("exhausted client after tightening: %v %v", d.Action, h)
	}
	// b had 7 of 10 left: the new limit's 5 bind.
	if served := serveN(l, "b", 10); served != 5 {
		t.Fatalf("client b served %d, want 5", served)
	}
	// c is new: 5, as the new limit says.
	if served := serveN(l, "c", 10); served != 5 {
		t.Fatalf("client c served %d, want 5", served)
	}
	// 6s later one unit of 10/m has leaked for a: one request, then refused.
	clock.Advance(6 * time.Second)
	if served := serveN(l, "a", 3); served != 1 {
		t.Fatalf("a after 6s: served %d, want 1", served)
	}
	// Once 10/m's horizon has passed the guard goes, on the next decision.
	clock.Advance(time.Minute)
	if served := serveN(l, "a", 10); served != 5 {
		t.Fatalf("a after the guard: served %d, want 5", served)
	}
	if cfg := l.cfg.Load(); len(cfg.guards) != 0 || !cfg.expires.IsZero() || len(cfg.take) != 1 {
		t.Fatalf("config after the horizon: %+v", cfg)
	}
}

func TestSetLimitsGuardFoldsIntoItsSuccessor(t *testing.T) {
	clock := newFakeClock(t0)
	l := memoryLimiter(t, clock, mustParse(t, "100/h", "10/m"), withName("x"), WithPolicyNames(map[string]string{"": "x"}), WithHeaders(HeadersLegacy|HeadersIETF))
	serveN(l, "a", 8)
	mustSet(t, l, "100/h", "5/m burst 4")
	// 10/m has 2 left, the new 5/m (burst 4) 4: the smaller shows. t is
	// derived from the folded figures by the new limit's interval: the
	// guard's 54s to full less the 2·12s the new limit's missing units
	// take (later than the guard's next unit, never later than full).
	d, h := decideHeaders(l, request("a"))
	if d.Action != Serve || h.Get("X-Ratelimit-Limit") != "4" || h.Get("X-Ratelimit-Remaining") != "1" ||
		h.Get("Ratelimit") != `"x-0";r=91;t=36, "x-1";r=1;t=30` {
		t.Fatalf("first after tightening: %v %v", d.Action, h)
	}
	serveN(l, "a", 1)
	d, h = decideHeaders(l, request("a"))
	if d.Action != Refuse || d.Result.Binding != 1 || h.Get("Retry-After") != "6" ||
		h.Get("Ratelimit") != `"x-0";r=90;t=36, "x-1";r=0;t=6` { // the refusing limit's t: its RetryAfter
		t.Fatalf("refused by the guard: %v %+v %v", d.Action, d.Result, h)
	}
}

func TestSetLimitsLoosenedOrRemovedTakesEffectAtOnce(t *testing.T) {
	for _, tc := range []struct {
		name     string
		from, to []string
		served   int // of 20 requests right after the swap, by a client that used up from
	}{
		{"rate raised", []string{"5/m"}, []string{"10/m"}, 10},
		{"burst raised", []string{"5/m"}, []string{"5/m burst 8"}, 8},
		{"penalty dropped", []string{"5/m penalty 1h"}, []string{"5/m"}, 5},
		{"removed", []string{"5/m", "1000/h"}, []string{"1000/h"}, 20},
		{"period changed", []string{"5/m"}, []string{"1/10s"}, 1},
		{"algorithm changed", []string{"5/m"}, []string{"5/m token_bucket"}, 5},
		// Two limits with the same algorithm and period each side: no
		// pairing is guessed, both are fresh.
		{"ambiguous", []string{"5/m", "6/m burst 2"}, []string{"4/m", "3/m burst 1"}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := newFakeClock(t0)
			l := memoryLimiter(t, clock, mustParse(t, tc.from...))
			serveN(l, "a", 20)
			mustSet(t, l, tc.to...)
			if g := l.cfg.Load().guards; len(g) != 0 {
				t.Fatalf("guards %+v", g)
			}
			if served := serveN(l, "a", 20); served != tc.served {
				t.Fatalf("served %d, want %d", served, tc.served)
			}
		})
	}
}

func TestSetLimitsPenaltyTightened(t *testing.T) {
	clock := newFakeClock(t0)
	l := memoryLimiter(t, clock, mustParse(t, "2/s fixed_window"))
	serveN(l, "a", 2)
	mustSet(t, l, "2/s fixed_window penalty 1m")
	// The old limit's window still counts a's two: refused by the guard.
	// The old limit has no penalty, so no lock is set.
	if d := l.Decide(request("a")); d.Action != Refuse {
		t.Fatalf("a in the same window: %v", d.Action)
	}
	if cfg := l.cfg.Load(); !cfg.expires.Equal(t0.Add(time.Second)) {
		t.Fatalf("guard until %v, want one window", cfg.expires)
	}
	clock.Advance(time.Second)
	if served := serveN(l, "a", 3); served != 2 {
		t.Fatalf("next window: served %d, want 2", served)
	}
	if d := l.Decide(request("a")); d.Action != Refuse || d.Result.RetryAfter != time.Minute {
		t.Fatalf("new limit's penalty: %v %+v", d.Action, d.Result)
	}
}

func TestSetLimitsGuardCarriedOverAndRevert(t *testing.T) {
	clock := newFakeClock(t0)
	l := memoryLimiter(t, clock, mustParse(t, "10/m"))
	serveN(l, "a", 10)
	mustSet(t, l, "5/m")
	// Another swap that leaves 5/m as is keeps its guard.
	mustSet(t, l, "1000/h", "5/m")
	cfg := l.cfg.Load()
	if len(cfg.guards) != 1 || cfg.guards[0].successor != 1 {
		t.Fatalf("guards after the second swap: %+v", cfg.guards)
	}
	if d := l.Decide(request("a")); d.Action != Refuse {
		t.Fatalf("a: %v, want still refused by 10/m", d.Action)
	}
	// Back to 10/m: it is a limit again (no guard), with the state it has
	// kept meanwhile: a is still out of it.
	mustSet(t, l, "10/m")
	if cfg := l.cfg.Load(); len(cfg.guards) != 0 {
		t.Fatalf("guards after the revert: %+v", cfg.guards)
	}
	if d := l.Decide(request("a")); d.Action != Refuse {
		t.Fatalf("a after the revert: %v", d.Action)
	}
	// A swap after the guard's horizon carries nothing over.
	mustSet(t, l, "5/m")
	clock.Advance(2 * time.Minute)
	mustSet(t, l, "5/m", "1000/h")
	if cfg := l.cfg.Load(); len(cfg.guards) != 0 {
		t.Fatalf("expired guard carried over: %+v", cfg.guards)
	}
}

func TestGuardHorizon(t *testing.T) {
	for _, tc := range []struct {
		limit string
		want  time.Duration
	}{
		{"10/m", time.Minute},
		{"10/m burst 5", 30 * time.Second},
		{"10/m leaky_bucket burst 5", 36 * time.Second},
		{"3/s token_bucket burst 1", 333334 * time.Microsecond},
		{"10/m fixed_window penalty 1m", 2 * time.Minute},
		{"10/m sliding_window", 2 * time.Minute},
		{"10/m sliding_log", time.Minute},
	} {
		s, err := mustParse(t, tc.limit)[0].Spec()
		if err != nil {
			t.Fatal(err)
		}
		if got := horizon(s); got != tc.want {
			t.Errorf("horizon(%s) = %v, want %v", tc.limit, got, tc.want)
		}
	}
}

// TestSetLimitsConcurrent swaps limits while decisions run (go test -race):
// every decision's headers come from one set, never a mix, and only from
// the sets given. The clock moves on so that guards (20/s → 5/s makes one,
// for 1s) also expire while decisions run.
func TestSetLimitsConcurrent(t *testing.T) {
	sets := [][]string{{"10/s"}, {"20/s", "1000/h"}, {"5/s"}}
	policies := map[string]string{ // RateLimit-Policy → X-RateLimit-Limit of that set
		`"c";q=10;w=1`:                        "10",
		`"c-0";q=20;w=1, "c-1";q=1000;w=3600`: "20",
		`"c";q=5;w=1`:                         "5",
	}
	clock := newFakeClock(t0)
	l := memoryLimiter(t, clock, mustParse(t, sets[0]...), withName("c"), WithPolicyNames(map[string]string{"": "c"}), WithHeaders(HeadersLegacy|HeadersIETF))
	var stop atomic.Bool
	var wg sync.WaitGroup
	var decided atomic.Int64
	errs := make(chan error, 4)
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				d := l.Decide(request("k" + strconv.Itoa(i%7)))
				decided.Add(1)
				h := http.Header{}
				d.setHeaders(h, nil)
				pol := h.Get("Ratelimit-Policy")
				want, ok := policies[pol]
				if !ok || h.Get("X-Ratelimit-Limit") != want && !(want == "20" && h.Get("X-Ratelimit-Limit") == "1000") {
					errs <- fmt.Errorf("decision %d: headers %v mix sets", i, h)
					return
				}
			}
		}()
	}
	for i := 0; i < 60; i++ {
		if err := l.SetLimits(mustParse(t, sets[i%len(sets)]...)); err != nil {
			t.Fatal(err)
		}
		// Half way through a guard's horizon, then past it, with
		// decisions in between to drop it.
		clock.Advance(600 * time.Millisecond)
		decisions(&decided, 4)
		clock.Advance(600 * time.Millisecond)
		decisions(&decided, 4)
	}
	stop.Store(true)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got := l.Limits(); len(got) != 1 || got[0].Rate != 5 { // 59 % 3: the last set
		t.Errorf("last set: %v", got)
	}
	l.Decide(request("k0"))
	if cfg := l.cfg.Load(); len(cfg.guards) != 0 || len(cfg.take) != 1 {
		t.Errorf("guards %+v after their horizon", cfg.guards)
	}
}

// decisions waits until n more decisions are counted in decided, or a
// second has passed (the deciders stopped on an error, which the test
// reports).
func decisions(decided *atomic.Int64, n int64) {
	want := decided.Load() + n
	for deadline := time.Now().Add(time.Second); decided.Load() < want && time.Now().Before(deadline); {
		runtime.Gosched()
	}
}
