package core

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/store"
)

// stackRun passes one request through the limiters in order, as nested
// middleware does (each gets the request the previous Stack returned),
// stopping at the first refusal. It returns the response headers, the
// request the last one passed on and the Decisions made.
func stackRun(client string, ls ...*Limiter) (http.Header, *http.Request, []Decision) {
	h := http.Header{}
	r := request(client)
	var ds []Decision
	for _, l := range ls {
		d := l.Decide(r)
		r = d.Stack(r, h)
		ds = append(ds, d)
		if d.Action == Refuse {
			break
		}
	}
	return h, r, ds
}

func wantLegacy(t *testing.T, step int, h http.Header, limit, remaining string, retry bool) {
	t.Helper()
	if got := h.Get("X-Ratelimit-Limit"); got != limit {
		t.Errorf("step %d: %s %q, want %q", step, "X-Ratelimit-Limit", got, limit)
	}
	if got := h.Get("X-Ratelimit-Remaining"); got != remaining {
		t.Errorf("step %d: %s %q, want %q", step, "X-Ratelimit-Remaining", got, remaining)
	}
	if _, ok := h["Retry-After"]; ok != retry {
		t.Errorf("step %d: Retry-After present %v, want %v (%v)", step, ok, retry, h)
	}
}

// wantBinding checks that FromContext on r gives want (its figures and
// outcome).
func wantBinding(t *testing.T, step int, r *http.Request, want Decision) {
	t.Helper()
	got, ok := FromContext(r.Context())
	if !ok {
		t.Fatalf("step %d: FromContext found no Decision", step)
	}
	if got.Result.Limit != want.Result.Limit || got.Result.Remaining != want.Result.Remaining ||
		got.Outcome != want.Outcome || got.Action != want.Action {
		t.Errorf("step %d: FromContext %+v, want %+v", step, got.Result, want.Result)
	}
}

func TestStackBinding(t *testing.T) {
	clock := newFakeClock(t0)
	st := memorystore.New(memorystore.WithClock(clock.Now))
	mk := func(name string, n int64) *Limiter {
		return mustNew(t, st, []store.Limit{store.PerHour(n)}, withName(name), WithClock(clock.Now))
	}
	global, route := mk("global", 3), mk("route", 100)
	// Global 3, route 100: the global one binds whatever the order.
	for step, order := range [][]*Limiter{{global, route}, {route, global}} {
		h, r, ds := stackRun("a", order...)
		wantLegacy(t, step+1, h, "3", []string{"2", "1"}[step], false)
		wantBinding(t, step+1, r, ds[map[bool]int{true: 0, false: 1}[order[0] == global]])
	}
	// The third request leaves the global one at 0; the fourth is refused
	// by it, with its own figures and Retry-After.
	stackRun("a", global, route)
	h, r, ds := stackRun("a", route, global)
	wantLegacy(t, 4, h, "3", "0", true)
	wantBinding(t, 4, r, ds[1])
	if ds[1].Action != Refuse {
		t.Fatalf("step 4: %v, want refuse", ds[1].Action)
	}

	// Route binds: global 100, route 3.
	global, route = mk("global2", 100), mk("route2", 3)
	h, r, ds = stackRun("b", global, route)
	wantLegacy(t, 5, h, "3", "2", false)
	wantBinding(t, 5, r, ds[1])
}

func TestStackTiesAndDecisionsWithoutFigures(t *testing.T) {
	clock := newFakeClock(t0)
	st := memorystore.New(memorystore.WithClock(clock.Now))
	opts := []Option{WithClock(clock.Now)}
	// Equal Remaining: the smaller Limit binds. big is charged 3 times
	// first, so that the stacked request leaves 1 in both.
	big := mustNew(t, st, []store.Limit{store.PerHour(5)}, append(opts, withName("big"))...)
	small := mustNew(t, st, []store.Limit{store.PerHour(2)}, append(opts, withName("small"))...)
	skipped := mustNew(t, st, []store.Limit{store.PerHour(1)}, append(opts, withName("skip"),
		WithSkip(func(*http.Request) bool { return true }))...)
	for i := 0; i < 3; i++ {
		big.Decide(request("c"))
	}
	// Skipped Decisions, before and after, bind over none.
	h, r, ds := stackRun("c", skipped, big, small, skipped)
	wantLegacy(t, 1, h, "2", "1", false)
	wantBinding(t, 1, r, ds[2])
	if ds[0].Outcome != OutcomeSkipped || ds[3].Outcome != OutcomeSkipped {
		t.Fatalf("outcomes %v, %v: want skipped", ds[0].Outcome, ds[3].Outcome)
	}

	// Only skipped: FromContext gives the skipped Decision, no headers.
	h, r, ds = stackRun("c", skipped)
	if len(h) != 0 {
		t.Errorf("skipped only: headers %v, want none", h)
	}
	wantBinding(t, 2, r, ds[0])
}

func TestStackReplacesTheFormerBindingsHeaders(t *testing.T) {
	clock := newFakeClock(t0)
	st := memorystore.New(memorystore.WithClock(clock.Now))
	outer := mustNew(t, st, []store.Limit{store.PerHour(10)}, withName("outer"), WithClock(clock.Now), WithHeaders(HeadersIETF))
	inner := mustNew(t, st, []store.Limit{store.PerHour(2)}, withName("inner"), WithClock(clock.Now))
	h, _, _ := stackRun("d", outer, inner)
	wantLegacy(t, 1, h, "2", "1", false)
	for _, name := range []string{"Ratelimit", "Ratelimit-Policy"} {
		if v, ok := h[name]; ok {
			t.Errorf("%s: %q left by the former binding Decision", name, v)
		}
	}
}

func TestFromContextWithoutLimiter(t *testing.T) {
	if d, ok := FromContext(context.Background()); ok {
		t.Errorf("FromContext(Background) = %+v, true; want false", d)
	}
}

// The record is a context: values and cancellation of the request's
// context pass through it, and it passes on the parent's.
func TestStackContext(t *testing.T) {
	type key struct{}
	parent, cancel := context.WithCancel(context.WithValue(context.Background(), key{}, "v"))
	l := mustNew(t, memorystore.New(), perSecond10)
	r := request("e").WithContext(parent)
	d := l.Decide(r)
	r = d.Stack(r, http.Header{})
	ctx, cancelChild := context.WithTimeout(r.Context(), time.Hour)
	defer cancelChild()
	if v := ctx.Value(key{}); v != "v" {
		t.Errorf("Value through the record: %v, want v", v)
	}
	if _, ok := FromContext(ctx); !ok {
		t.Error("FromContext of a context derived from the request's: not found")
	}
	cancel()
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("cancelling the parent did not reach a context derived from the record")
	}
}

// stackSink keeps the benchmarks' requests on the heap, as a middleware
// chain does.
var stackSink *http.Request

// BenchmarkStack measures Stack for the first Limiter of a request (which
// makes the record) and a later one (which updates it); to compare,
// SetHeaders alone (what adapters did before), and SetHeaders with the
// record made by context.WithValue and Request.WithContext (four
// allocations with the headers' instead of one).
//
//	go test -run '^$' -bench Stack -benchmem ./core/
func BenchmarkStack(b *testing.B) {
	l, err := New(memorystore.New(), "test", keyFromHeader, []store.Limit{store.PerHour(1_000_000_000)})
	if err != nil {
		b.Fatal(err)
	}
	r := request("k")
	d := l.Decide(r)
	h := http.Header{}
	b.Run("setheaders", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			clear(h)
			d.setHeaders(h, nil)
		}
	})
	b.Run("first", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			clear(h)
			stackSink = d.Stack(r, h)
		}
	})
	b.Run("first-withvalue", func(b *testing.B) {
		type holder struct{ d Decision }
		type key struct{}
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			clear(h)
			d.setHeaders(h, nil)
			stackSink = r.WithContext(context.WithValue(r.Context(), key{}, &holder{d}))
		}
	})
	r2 := d.Stack(r, h)
	b.Run("later", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			stackSink = d.Stack(r2, h)
		}
	})
}

// The first Limiter's record, headers included, is one allocation, as
// SetHeaders alone; a later Limiter that does not bind costs none.
func TestStackAllocs(t *testing.T) {
	l := mustNew(t, memorystore.New(), []store.Limit{store.PerHour(1_000_000)})
	r := request("f")
	d := l.Decide(r)
	h := http.Header{}
	first := testing.AllocsPerRun(200, func() { stackSink = d.Stack(r, h) })
	if first > 1 {
		t.Errorf("first Stack: %v allocations, want 1 (the record, holding the headers' values and their bytes)", first)
	}
	r2 := d.Stack(r, h)
	if later := testing.AllocsPerRun(200, func() { stackSink = d.Stack(r2, h) }); later != 0 {
		t.Errorf("later Stack that does not bind: %v allocations, want 0", later)
	}
}
