package core

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"weak"

	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/store"
)

// flakyStore is a shared store that can be taken away: a memory store
// (the "Redis") that fails every call while down, and announces resets as
// a Redis store does.
type flakyStore struct {
	*memorystore.Store
	fleet int // what Instances says (store.Fleet); 0: 1
	down  atomic.Bool
	mu    sync.Mutex
	hooks []*func(string)
	// hold, when set, holds each Take until it is closed, failed or not:
	// a call in flight.
	hold atomic.Pointer[chan struct{}]
}

var errDown = errors.New("store down")

func newFlakyStore(clock *fakeClock) *flakyStore {
	return &flakyStore{Store: memorystore.New(memorystore.WithClock(clock.Now))}
}

func (s *flakyStore) Instances() int { return max(s.fleet, 1) }

func (s *flakyStore) Take(ctx context.Context, key string, n int64, limits ...store.Spec) (store.Result, error) {
	if h := s.hold.Load(); h != nil {
		<-*h
	}
	if s.down.Load() {
		return store.Result{}, errDown
	}
	return s.Store.Take(ctx, key, n, limits...)
}

func (s *flakyStore) Peek(ctx context.Context, key string, n int64, limits ...store.Spec) (store.Result, error) {
	if s.down.Load() {
		return store.Result{}, errDown
	}
	return s.Store.Peek(ctx, key, n, limits...)
}

func (s *flakyStore) Reset(ctx context.Context, key string, limits ...store.Spec) error {
	if s.down.Load() {
		return errDown
	}
	if err := s.Store.Reset(ctx, key, limits...); err != nil {
		return err
	}
	s.announce(key)
	return nil
}

func (s *flakyStore) OnReset(f func(string)) func() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hooks = append(s.hooks, &f)
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.hooks = slices.DeleteFunc(slices.Clone(s.hooks), func(h *func(string)) bool { return h == &f })
	}
}

func (s *flakyStore) announce(key string) {
	s.mu.Lock()
	hooks := s.hooks
	s.mu.Unlock()
	for _, f := range hooks {
		(*f)(key)
	}
}

// pending returns the pending cost of key's record (0 without one).
func (sh *recordShard) pending(key string) int64 {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if r := sh.m[key]; r != nil {
		return r.pending
	}
	return 0
}

func (s *flakyStore) hookCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.hooks)
}

// fallbackLimiter is a Limiter on a flakyStore whose fallback runs on clock.
func fallbackLimiter(t *testing.T, clock *fakeClock, lim store.Limit) (*Limiter, *flakyStore) {
	t.Helper()
	s := newFlakyStore(clock)
	l, err := New(s, "api", headerKey, []store.Limit{lim}, WithClock(clock.Now),
		WithFallbackStore(memorystore.New(memorystore.WithClock(clock.Now))))
	if err != nil {
		t.Fatal(err)
	}
	return l, s
}

// decideN makes n decisions for client and returns how many were served
// and the outcome of the last.
func decideN(l *Limiter, client string, n int) (served int, last Decision) {
	for i := 0; i < n; i++ {
		last = l.Decide(clientRequest(client, ""))
		if last.Action == Serve {
			served++
		}
	}
	return served, last
}

// While the store is away, a key the store had refused stays refused until
// the time the store gave, and a key with r left gets at most r more.
func TestFallbackStartsFromTheStoresAnswer(t *testing.T) {
	clock := newFakeClock(time.Unix(1_700_000_000, 0))
	lim := store.Limit{Algorithm: store.FixedWindow, Rate: 5, Period: time.Minute}
	l, s := fallbackLimiter(t, clock, lim)
	if n, _ := decideN(l, "spent", 6); n != 5 {
		t.Fatalf("store admitted %d of 6, want 5", n)
	}
	if n, _ := decideN(l, "some", 2); n != 2 {
		t.Fatalf("store admitted %d of 2", n)
	}
	reset := l.Decide(clientRequest("spent", "")).Result.ResetAfter
	s.down.Store(true)
	n, d := decideN(l, "spent", 3)
	if n != 0 || d.Outcome != OutcomeFallback || d.Result.RetryAfter <= 0 || d.Result.RetryAfter > reset {
		t.Errorf("refused key while away: %d served, last %v %+v; want 0, retry within %v", n, d.Outcome, d.Result, reset)
	}
	if n, d := decideN(l, "some", 5); n != 3 || d.Result.Remaining != 0 {
		t.Errorf("key with 3 left: %d served while away, last %+v; want 3", n, d.Result)
	}
	if n, _ := decideN(l, "new", 7); n != 5 {
		t.Errorf("unseen key: %d of 7 served while away, want the fallback's 5", n)
	}
	clock.Advance(reset)
	if n, d := decideN(l, "spent", 6); n != 5 || d.Action != Refuse {
		t.Errorf("after the store's reset time: %d of 6 served (%v), want a full 5", n, d.Action)
	}
}

// A decision the fallback makes while another Take of the key is on its
// way to the store leaves room for that Take: the store may admit it yet.
func TestFallbackLeavesRoomForTakesInFlight(t *testing.T) {
	clock := newFakeClock(time.Unix(1_700_000_000, 0))
	l, s := fallbackLimiter(t, clock, store.Limit{Algorithm: store.FixedWindow, Rate: 5, Period: time.Minute})
	if n, _ := decideN(l, "a", 3); n != 3 {
		t.Fatalf("store admitted %d of 3", n)
	}
	// One Take in flight; the store answers it, for 1 of the 2 left, once
	// the fallback has decided the others.
	hold := make(chan struct{})
	s.hold.Store(&hold)
	inFlight := make(chan Decision)
	go func() { inFlight <- l.Decide(clientRequest("a", "")) }()
	for l.shared.shard("3:api:a").pending("3:api:a") == 0 {
		time.Sleep(time.Millisecond)
	}
	s.hold.Store(nil)
	s.down.Store(true)
	n, _ := decideN(l, "a", 3)
	s.down.Store(false)
	close(hold)
	if d := <-inFlight; d.Outcome != OutcomeAllowed {
		t.Fatalf("the Take in flight: %v, want allowed by the store", d.Outcome)
	}
	if n != 1 {
		t.Errorf("the fallback admitted %d with 2 left and one Take in flight, want 1", n)
	}
}

// Two instances on one store: each admits its share while the store is
// away; once it is back, the first to reach it charges its debt with one
// Take and decides the key by its fallback meanwhile (settleHold), so it
// admits nothing through the store that the other's fallback admitted.
func TestFallbackHoldsUntilTheFleetHasPaid(t *testing.T) {
	clock := newFakeClock(time.Unix(1_700_000_000, 0))
	shared := memorystore.New(memorystore.WithClock(clock.Now))
	lim := store.Limit{Algorithm: store.FixedWindow, Rate: 10, Period: time.Minute}
	var instances [2]*Limiter
	var stores [2]*flakyStore
	for i := range instances {
		stores[i] = &flakyStore{Store: shared, fleet: 2}
		l, err := New(stores[i], "api", headerKey, []store.Limit{lim}, WithClock(clock.Now))
		if err != nil {
			t.Fatal(err)
		}
		l.shared.hold = time.Hour // outlasts the test however slow it runs
		instances[i] = l
		stores[i].down.Store(true)
	}
	served := 0
	for _, l := range instances {
		n, _ := decideN(l, "a", 8)
		served += n
	}
	if served != 10 {
		t.Fatalf("the fallbacks admitted %d while the store was away, want 10 (5 each)", served)
	}
	for _, s := range stores {
		s.down.Store(false)
	}
	// The first instance back sends one Take (its debt rides along), then
	// holds; the other's Take carries its debt, which no longer fits.
	for _, l := range instances {
		n, _ := decideN(l, "a", 5)
		served += n
	}
	if served > 11 {
		t.Errorf("%d admitted in the window of 10, want at most 11 (the first Take after the store came back)", served)
	}
}

// For an algorithm that refills steadily, the remembered allowance grows
// back at the limit's pace.
func TestFallbackRefillsSteadily(t *testing.T) {
	clock := newFakeClock(time.Unix(1_700_000_000, 0))
	l, s := fallbackLimiter(t, clock, store.Limit{Rate: 10, Period: time.Second}) // GCRA, burst 10
	if n, _ := decideN(l, "a", 10); n != 10 {
		t.Fatalf("store admitted %d of 10", n)
	}
	s.down.Store(true)
	if n, d := decideN(l, "a", 1); n != 0 || d.Result.RetryAfter <= 0 || d.Result.RetryAfter > 100*time.Millisecond {
		t.Errorf("spent key: %d served, %+v; want refused for at most 100ms", n, d.Result)
	}
	clock.Advance(500 * time.Millisecond)
	if n, _ := decideN(l, "a", 10); n < 4 || n > 5 {
		t.Errorf("half a second later: %d served, want about 5", n)
	}
}

// A Reset clears what the fallback remembers and holds, also when the
// store is away (the Reset then fails, but holds in this process).
func TestFallbackForgetsOnReset(t *testing.T) {
	clock := newFakeClock(time.Unix(1_700_000_000, 0))
	lim := store.Limit{Algorithm: store.FixedWindow, Rate: 2, Period: time.Hour, Penalty: time.Hour}
	l, s := fallbackLimiter(t, clock, lim)
	decideN(l, "a", 3) // refused by the store: penalty until an hour later
	s.down.Store(true)
	if n, _ := decideN(l, "a", 1); n != 0 {
		t.Fatal("the refused key was served while away")
	}
	if err := l.Reset(context.Background(), "a"); !errors.Is(err, errDown) {
		t.Fatalf("Reset while away: %v, want the store's error", err)
	}
	if n, _ := decideN(l, "a", 3); n != 2 {
		t.Errorf("after a Reset made while away: %d of 3 served, want 2", n)
	}
}

// A Reset announced by the store (made by another process) clears what
// the fallback holds of the key; "" clears all of it. The Limiters of a
// store register one hook in all.
func TestFallbackHearsAnnouncedResets(t *testing.T) {
	clock := newFakeClock(time.Unix(1_700_000_000, 0))
	lim := store.Limit{Rate: 1, Period: time.Hour, Penalty: time.Hour}
	l, s := fallbackLimiter(t, clock, lim)
	if _, err := New(s, "other", headerKey, []store.Limit{lim}); err != nil || s.hookCount() != 1 {
		t.Fatalf("second Limiter: %v, %d hooks on the store, want 1", err, s.hookCount())
	}
	s.down.Store(true)
	for _, k := range []string{"a", "b"} {
		if n, _ := decideN(l, k, 2); n != 1 {
			t.Fatalf("fallback served %d of 2 for %s", n, k)
		}
	}
	s.announce("3:api:a")
	s.announce("5:other:b") // another Limiter's key
	if n, _ := decideN(l, "a", 1); n != 1 {
		t.Error("a was announced reset but is still refused")
	}
	if n, _ := decideN(l, "b", 1); n != 0 {
		t.Error("b was not reset but is served")
	}
	s.announce("")
	if n, _ := decideN(l, "b", 1); n != 1 {
		t.Error("after a reset of everything b is still refused")
	}
}

// Limiters made and dropped leave nothing behind: one hook per store
// while they live, no fallback store until the first failure (then one for
// all), no goroutine; once they are collected, neither the hook nor the
// fallback, and nothing holds the store.
func TestFallbackLifecycle(t *testing.T) {
	clock := newFakeClock(time.Unix(1_700_000_000, 0))
	s := newFlakyStore(clock)
	runtime.GC()
	goroutines, made := runtime.NumGoroutine(), fallbacksMade.Load()
	live := make([]*Limiter, 0, 2000)
	for i := 0; i < 1000; i++ {
		l, err := New(s, fmt.Sprint("up", i), headerKey, []store.Limit{store.PerMinute(5)})
		if err != nil {
			t.Fatal(err)
		}
		l.Decide(clientRequest("a", ""))
		live = append(live, l)
	}
	if got := fallbacksMade.Load() - made; got != 0 {
		t.Errorf("%d fallback stores made before any failure, want 0", got)
	}
	s.down.Store(true)
	for i := 0; i < 1000; i++ {
		l, _ := New(s, fmt.Sprint("down", i), headerKey, []store.Limit{store.PerMinute(5)})
		if d := l.Decide(clientRequest("a", "")); d.Outcome != OutcomeFallback {
			t.Fatalf("outcome %v while the store is down", d.Outcome)
		}
		live = append(live, l)
	}
	runtime.GC()
	if got := fallbacksMade.Load() - made; got != 1 {
		t.Errorf("%d fallback stores made for 1000 Limiters on one store, want 1", got)
	}
	if n := s.hookCount(); n != 1 {
		t.Errorf("%d reset hooks on the store after 2000 Limiters, want 1", n)
	}
	// Other tests' settling goroutines may still be ending: wait for them.
	n := runtime.NumGoroutine()
	for deadline := time.Now().Add(2 * time.Second); n > goroutines && time.Now().Before(deadline); n = runtime.NumGoroutine() {
		time.Sleep(10 * time.Millisecond)
	}
	if n > goroutines {
		t.Errorf("%d goroutines after 2000 Limiters, %d before", n, goroutines)
	}
	runtime.KeepAlive(live)

	gone := func() bool { runtime.GC(); return s.hookCount() == 0 }
	for deadline := time.Now().Add(5 * time.Second); !gone() && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if n := s.hookCount(); n != 0 {
		t.Errorf("%d reset hooks on the store after its Limiters were collected, want 0", n)
	}
	fallbacks.Lock()
	_, held := fallbacks.m[s]
	fallbacks.Unlock()
	if held {
		t.Error("the store's fallback is still held after its Limiters were collected")
	}
	ws := weak.Make(s)

	for deadline := time.Now().Add(5 * time.Second); ws.Value() != nil && time.Now().Before(deadline); {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	if ws.Value() != nil {
		t.Error("the store is still reachable after its Limiters were collected")
	}
}

// fleetStore is a flakyStore shared by a fleet of instances processes.
type fleetStore struct {
	*flakyStore
	instances int
}

func (s *fleetStore) Instances() int { return s.instances }

// settled waits until l's fallback has charged the store with what it
// admitted while the store was away.
func settled(t *testing.T, l *Limiter) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); l.shared.owed.Load() || l.shared.flushing.Load(); {
		if time.Now().After(deadline) {
			t.Fatal("the fallback's admissions were not charged to the store within 5 s")
		}
		time.Sleep(time.Millisecond)
	}
}

// Of a fleet of 3, each instance's fallback admits a third (rounded down) of
// what the store last said was left, or of the limit for a key it never
// saw; once the store answers again, what it admitted is charged there.
func TestFallbackTakesItsShareAndSettles(t *testing.T) {
	clock := newFakeClock(time.Unix(1_700_000_000, 0))
	s := &fleetStore{flakyStore: newFlakyStore(clock), instances: 3}
	lim := store.Limit{Algorithm: store.FixedWindow, Rate: 20, Period: time.Hour}
	l, err := New(s, "api", headerKey, []store.Limit{lim}, WithClock(clock.Now),
		WithFallbackStore(memorystore.New(memorystore.WithClock(clock.Now))))
	if err != nil {
		t.Fatal(err)
	}
	decideN(l, "some", 9) // 11 left
	s.down.Store(true)
	if n, _ := decideN(l, "some", 10); n != 3 {
		t.Errorf("key with 11 left: %d admitted while away, want ⌊11/3⌋ = 3", n)
	}
	if n, d := decideN(l, "new", 10); n != 6 || d.Result.RetryAfter <= 0 {
		t.Errorf("unseen key: %d admitted while away (last %+v), want ⌊20/3⌋ = 6", n, d.Result)
	}
	s.down.Store(false)
	l.Decide(clientRequest("other", "")) // the store answers again
	settled(t, l)
	for key, want := range map[string]int64{"some": 11 - 3, "new": 20 - 6} {
		if r, _ := s.Store.Peek(context.Background(), "3:api:"+key, 0, specs(lim)...); r.Remaining != want {
			t.Errorf("%s: %d left in the store after settling, want %d", key, r.Remaining, want)
		}
	}
}

// A charge that no longer fits takes what is left, and no more: it is
// never refused, so it sets no penalty lock.
func TestFallbackSettlesWhatFits(t *testing.T) {
	clock := newFakeClock(time.Unix(1_700_000_000, 0))
	s := newFlakyStore(clock)
	lim := store.Limit{Algorithm: store.FixedWindow, Rate: 5, Period: time.Hour, Penalty: 24 * time.Hour}
	l, err := New(s, "api", headerKey, []store.Limit{lim}, WithClock(clock.Now),
		WithFallbackStore(memorystore.New(memorystore.WithClock(clock.Now))))
	if err != nil {
		t.Fatal(err)
	}
	decideN(l, "a", 2) // 3 left
	s.down.Store(true)
	if n, _ := decideN(l, "a", 3); n != 3 {
		t.Fatalf("%d admitted while away, want 3", n)
	}
	s.down.Store(false)
	ctx := context.Background()
	s.Store.Take(ctx, "3:api:a", 2, specs(lim)...) // another instance, meanwhile
	l.Decide(clientRequest("other", ""))
	settled(t, l)
	if r, _ := s.Store.Peek(ctx, "3:api:a", 0, specs(lim)...); r.Remaining != 0 || !r.Allowed {
		t.Errorf("after settling: %+v, want 0 left and no penalty lock", r)
	}
}

// The first request on a key after the store is back carries what the
// fallback admitted for it: the store admits none of it twice.
func TestFallbackDebtRidesOnTheNextTake(t *testing.T) {
	clock := newFakeClock(time.Unix(1_700_000_000, 0))
	s := &fleetStore{flakyStore: newFlakyStore(clock), instances: 3}
	lim := store.Limit{Algorithm: store.FixedWindow, Rate: 20, Period: time.Hour}
	l, err := New(s, "api", headerKey, []store.Limit{lim}, WithClock(clock.Now),
		WithFallbackStore(memorystore.New(memorystore.WithClock(clock.Now))))
	if err != nil {
		t.Fatal(err)
	}
	s.down.Store(true)
	decideN(l, "new", 6)
	s.down.Store(false)
	if d := l.Decide(clientRequest("new", "")); d.Outcome != OutcomeAllowed || d.Result.Remaining != 20-6-1 {
		t.Errorf("first decision after the outage: %v %+v, want allowed with %d left", d.Outcome, d.Result, 20-6-1)
	}
	settled(t, l)
}
