package fallback

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/core/storetest"
)

// fakeClock is a settable clock for the Limiter, the fallback and the
// memory stores.
type fakeClock = storetest.Clock

var newFakeClock = storetest.NewClock

func headerKey(r *http.Request) (string, error) { return r.Header.Get("X-Client"), nil }

func clientRequest(client string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.Header.Set("X-Client", client)
	return r
}

func specs(limits ...store.Limit) []store.Spec {
	out := make([]store.Spec, len(limits))
	for i, l := range limits {
		out[i], _ = l.Spec() // the zero Spec on error
	}
	return out
}

// flakyStore is a backend that can be taken away: a memory store (the
// "Redis") that fails every call while down.
type flakyStore struct {
	*memorystore.Store
	down atomic.Bool
	// hold, when set, holds each Take until it is closed, failed or not:
	// a call in flight.
	hold atomic.Pointer[chan struct{}]
}

var errDown = errors.New("store down")

func newFlakyStore(clock *fakeClock) *flakyStore {
	return &flakyStore{Store: memorystore.New(memorystore.WithClock(clock.Now))}
}

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
	return s.Store.Reset(ctx, key, limits...)
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

// newFallback is a Store over s for a fleet of instances (0: 1) on clock.
func newFallback(s store.Store, clock *fakeClock, instances int) *Store {
	return New(s, Config{Local: memorystore.New(memorystore.WithClock(clock.Now)), Now: clock.Now,
		Instances: func() int { return instances }})
}

// limiter is a Limiter named "api" on f, on clock.
func limiter(t *testing.T, f *Store, clock *fakeClock, lim store.Limit) *core.Limiter {
	t.Helper()
	l, err := core.New(f, "api", headerKey, []store.Limit{lim}, core.WithClock(clock.Now))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// fallbackLimiter is a Limiter on a fallback Store over a flakyStore.
func fallbackLimiter(t *testing.T, clock *fakeClock, lim store.Limit) (*core.Limiter, *flakyStore, *Store) {
	t.Helper()
	s := newFlakyStore(clock)
	f := newFallback(s, clock, 1)
	t.Cleanup(f.Close)
	return limiter(t, f, clock, lim), s, f
}

// decideN makes n decisions for client and returns how many were served
// and the outcome of the last.
func decideN(l *core.Limiter, client string, n int) (served int, last core.Decision) {
	for i := 0; i < n; i++ {
		last = l.Decide(clientRequest(client))
		if last.Action == core.Serve {
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
	l, s, _ := fallbackLimiter(t, clock, lim)
	if n, _ := decideN(l, "spent", 6); n != 5 {
		t.Fatalf("store admitted %d of 6, want 5", n)
	}
	if n, _ := decideN(l, "some", 2); n != 2 {
		t.Fatalf("store admitted %d of 2", n)
	}
	reset := l.Decide(clientRequest("spent")).Result.ResetAfter
	s.down.Store(true)
	n, d := decideN(l, "spent", 3)
	if n != 0 || d.Outcome != core.OutcomeFallback || d.Result.RetryAfter <= 0 || d.Result.RetryAfter > reset {
		t.Errorf("refused key while away: %d served, last %v %+v; want 0, retry within %v", n, d.Outcome, d.Result, reset)
	}
	if n, d := decideN(l, "some", 5); n != 3 || d.Result.Remaining != 0 {
		t.Errorf("key with 3 left: %d served while away, last %+v; want 3", n, d.Result)
	}
	if n, _ := decideN(l, "new", 7); n != 5 {
		t.Errorf("unseen key: %d of 7 served while away, want the fallback's 5", n)
	}
	clock.Advance(reset)
	if n, d := decideN(l, "spent", 6); n != 5 || d.Action != core.Refuse {
		t.Errorf("after the store's reset time: %d of 6 served (%v), want a full 5", n, d.Action)
	}
}

// A decision the fallback makes while another Take of the key is on its
// way to the store leaves room for that Take: the store may admit it yet.
func TestFallbackLeavesRoomForTakesInFlight(t *testing.T) {
	clock := newFakeClock(time.Unix(1_700_000_000, 0))
	l, s, f := fallbackLimiter(t, clock, store.Limit{Algorithm: store.FixedWindow, Rate: 5, Period: time.Minute})
	if n, _ := decideN(l, "a", 3); n != 3 {
		t.Fatalf("store admitted %d of 3", n)
	}
	// One Take in flight; the store answers it, for 1 of the 2 left, once
	// the fallback has decided the others.
	hold := make(chan struct{})
	s.hold.Store(&hold)
	inFlight := make(chan core.Decision)
	go func() { inFlight <- l.Decide(clientRequest("a")) }()
	for f.shard("3:api:a").pending("3:api:a") == 0 {
		time.Sleep(time.Millisecond)
	}
	s.hold.Store(nil)
	s.down.Store(true)
	n, _ := decideN(l, "a", 3)
	s.down.Store(false)
	close(hold)
	if d := <-inFlight; d.Outcome != core.OutcomeAllowed {
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
	var instances [2]*core.Limiter
	var stores [2]*flakyStore
	for i := range instances {
		stores[i] = &flakyStore{Store: shared}
		f := newFallback(stores[i], clock, 2)
		f.hold = time.Hour // outlasts the test however slow it runs
		t.Cleanup(f.Close)
		instances[i] = limiter(t, f, clock, lim)
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
	l, s, _ := fallbackLimiter(t, clock, store.Limit{Rate: 10, Period: time.Second}) // GCRA, burst 10
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
	l, s, _ := fallbackLimiter(t, clock, lim)
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

// A Reset announced by the backend (made by another process) clears what
// the fallback holds of the key; "" clears all of it.
func TestFallbackHearsAnnouncedResets(t *testing.T) {
	clock := newFakeClock(time.Unix(1_700_000_000, 0))
	lim := store.Limit{Rate: 1, Period: time.Hour, Penalty: time.Hour}
	l, s, f := fallbackLimiter(t, clock, lim)
	s.down.Store(true)
	for _, k := range []string{"a", "b"} {
		if n, _ := decideN(l, k, 2); n != 1 {
			t.Fatalf("fallback served %d of 2 for %s", n, k)
		}
	}
	f.Announced("3:api:a")
	f.Announced("5:other:b") // another Limiter's key
	if n, _ := decideN(l, "a", 1); n != 1 {
		t.Error("a was announced reset but is still refused")
	}
	if n, _ := decideN(l, "b", 1); n != 0 {
		t.Error("b was not reset but is served")
	}
	f.Announced("")
	if n, _ := decideN(l, "b", 1); n != 1 {
		t.Error("after a reset of everything b is still refused")
	}
}

// A Store starts no goroutine while it owes the backend nothing; the pass
// that charges its debts ends when they are charged, and Close waits for
// it.
func TestFallbackLifecycle(t *testing.T) {
	clock := newFakeClock(time.Unix(1_700_000_000, 0))
	before := runtime.NumGoroutine()
	l, s, f := fallbackLimiter(t, clock, store.PerMinute(5))
	decideN(l, "a", 3)
	if n := runtime.NumGoroutine(); n > before {
		t.Errorf("%d goroutines after healthy decisions, %d before", n, before)
	}
	s.down.Store(true)
	decideN(l, "b", 3)
	s.down.Store(false)
	decideN(l, "c", 1) // answered: the debts of b are charged
	f.Close()
	if f.owed.Load() || f.flushing.Load() {
		t.Error("Close returned before the debts were charged")
	}
	if r, _ := s.Store.Peek(context.Background(), "3:api:b", 0, specs(store.PerMinute(5))...); r.Remaining != 2 {
		t.Errorf("b after Close: %d left in the backend, want 2 (3 charged)", r.Remaining)
	}
}

// settled waits until f has charged the backend with what it admitted
// while the backend was away.
func settled(t *testing.T, f *Store) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); f.owed.Load() || f.flushing.Load(); {
		if time.Now().After(deadline) {
			t.Fatal("the fallback's admissions were not charged to the backend within 5 s")
		}
		time.Sleep(time.Millisecond)
	}
}

// Of a fleet of 3, each instance's fallback admits a third (rounded down) of
// what the store last said was left, or of the limit for a key it never
// saw; once the store answers again, what it admitted is charged there.
func TestFallbackTakesItsShareAndSettles(t *testing.T) {
	clock := newFakeClock(time.Unix(1_700_000_000, 0))
	s := newFlakyStore(clock)
	f := newFallback(s, clock, 3)
	t.Cleanup(f.Close)
	lim := store.Limit{Algorithm: store.FixedWindow, Rate: 20, Period: time.Hour}
	l := limiter(t, f, clock, lim)
	decideN(l, "some", 9) // 11 left
	s.down.Store(true)
	if n, _ := decideN(l, "some", 10); n != 3 {
		t.Errorf("key with 11 left: %d admitted while away, want ⌊11/3⌋ = 3", n)
	}
	if n, d := decideN(l, "new", 10); n != 6 || d.Result.RetryAfter <= 0 {
		t.Errorf("unseen key: %d admitted while away (last %+v), want ⌊20/3⌋ = 6", n, d.Result)
	}
	s.down.Store(false)
	l.Decide(clientRequest("other")) // the store answers again
	settled(t, f)
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
	f := newFallback(s, clock, 1)
	t.Cleanup(f.Close)
	lim := store.Limit{Algorithm: store.FixedWindow, Rate: 5, Period: time.Hour, Penalty: 24 * time.Hour}
	l := limiter(t, f, clock, lim)
	decideN(l, "a", 2) // 3 left
	s.down.Store(true)
	if n, _ := decideN(l, "a", 3); n != 3 {
		t.Fatalf("%d admitted while away, want 3", n)
	}
	s.down.Store(false)
	ctx := context.Background()
	s.Store.Take(ctx, "3:api:a", 2, specs(lim)...) // another instance, meanwhile
	l.Decide(clientRequest("other"))
	settled(t, f)
	if r, _ := s.Store.Peek(ctx, "3:api:a", 0, specs(lim)...); r.Remaining != 0 || !r.Allowed {
		t.Errorf("after settling: %+v, want 0 left and no penalty lock", r)
	}
}

// The first request on a key after the store is back carries what the
// fallback admitted for it: the store admits none of it twice.
func TestFallbackDebtRidesOnTheNextTake(t *testing.T) {
	clock := newFakeClock(time.Unix(1_700_000_000, 0))
	s := newFlakyStore(clock)
	f := newFallback(s, clock, 3)
	t.Cleanup(f.Close)
	lim := store.Limit{Algorithm: store.FixedWindow, Rate: 20, Period: time.Hour}
	l := limiter(t, f, clock, lim)
	s.down.Store(true)
	decideN(l, "new", 6)
	s.down.Store(false)
	if d := l.Decide(clientRequest("new")); d.Outcome != core.OutcomeAllowed || d.Result.Remaining != 20-6-1 {
		t.Errorf("first decision after the outage: %v %+v, want allowed with %d left", d.Outcome, d.Result, 20-6-1)
	}
	settled(t, f)
}

// The fallback does not decide a key from a backend's answer bound by an
// InFlight limit (its free slots come back when requests end), and charges
// its debts without the InFlight limits (no request would release a slot a
// debt took).
func TestFallbackInFlight(t *testing.T) {
	clock := newFakeClock(time.Unix(1_700_000_000, 0))
	rate := store.Limit{Algorithm: store.TokenBucket, Rate: 2, Period: time.Hour}
	limits := specs(store.MaxInFlight(1, time.Hour), rate)
	f := newFallback(newFlakyStore(clock), clock, 1)
	for binding, known := range []bool{false, true} {
		res := store.Result{Allowed: true, Limit: 2, Remaining: 1, ResetAfter: time.Minute, Binding: binding}
		f.remember("k", &res, limits, ticket{})
		if r := f.shard("k").m["k"]; r.known != known {
			t.Errorf("an answer bound by limit %d: known %v, want %v", binding, r.known, known)
		}
	}
	if got := withoutInFlight(limits); len(got) != 1 || got[0] != limits[1] {
		t.Errorf("withoutInFlight(%v) = %v, want the rate alone", limits, got)
	}
}

// BenchmarkTake measures the fallback's note of each healthy Take (begin
// and after: two locks of the key's shard) against the backend alone, on
// a memory store over 1000 keys.
//
//	go test -run '^$' -bench Take -benchmem ./internal/fallback
func BenchmarkTake(b *testing.B) {
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = fmt.Sprint("4:test:client-", i)
	}
	// A GCRA limit whose every Take moves the key's state 1 s ahead, and
	// that refuses a key only after a billion: the states outlive the gaps
	// between visits, so every Take updates a state the memory store holds.
	// (Under PerHour(1e9), 4 µs ahead, states expired between visits and
	// were reclaimed and inserted again, an allocation each.)
	limits := specs(store.Limit{Rate: 1_000_000_000, Period: 1_000_000_000 * time.Second})
	mem := memorystore.New()
	for _, c := range []struct {
		name string
		s    store.Store
	}{{"backend", mem}, {"fallback", New(mem, Config{Local: memorystore.New()})}} {
		b.Run(c.name, func(b *testing.B) {
			ctx := context.Background()
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for i := 0; pb.Next(); i++ {
					if _, err := c.s.Take(ctx, keys[i%len(keys)], 1, limits...); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}

// lostStore is a backend whose next Take loses its reply: it runs (when
// ran) and then fails with an Uncertain error, settled by settle (nil:
// one the backend cannot identify).
type lostStore struct {
	*flakyStore
	lose   atomic.Bool
	ran    bool
	settle func(ctx context.Context, owe int64) (int64, error)
}

var errLost = errors.New("connection lost")

func (s *lostStore) Take(ctx context.Context, key string, n int64, limits ...store.Spec) (store.Result, error) {
	if !s.lose.Swap(false) {
		return s.flakyStore.Take(ctx, key, n, limits...)
	}
	if s.ran {
		if _, err := s.flakyStore.Take(ctx, key, n, limits...); err != nil {
			return store.Result{}, err
		}
	}
	return store.Result{}, &Uncertain{Err: errLost, Settle: s.settle}
}

// A call whose reply was lost is decided locally and owed only through its
// settlement: charged once whether it ran or not, never twice; one that
// cannot be settled is taken as having run.
func TestFallbackSettlesCallsWhoseReplyWasLost(t *testing.T) {
	lim := store.Limit{Algorithm: store.FixedWindow, Rate: 20, Period: time.Hour}
	for _, c := range []struct {
		name      string
		ran       bool
		settle    bool // the backend can identify the call
		wantOwe   int64
		wantStore int64 // charged in the backend in the end
	}{
		{"ran, settled", true, true, 1, 1},
		{"did not run, settled", false, true, 1, 1},
		{"ran, not identified", true, false, 0, 1},
		{"did not run, not identified", false, false, 0, 0}, // uncharged, never twice
	} {
		t.Run(c.name, func(t *testing.T) {
			clock := newFakeClock(time.Unix(1_700_000_000, 0))
			s := &lostStore{flakyStore: newFlakyStore(clock), ran: c.ran}
			var owes []int64
			if c.settle {
				s.settle = func(_ context.Context, owe int64) (int64, error) {
					owes = append(owes, owe)
					if c.ran {
						return 0, nil // it charged what was owed
					}
					return owe, nil
				}
			}
			f := newFallback(s, clock, 1)
			t.Cleanup(f.Close)
			l := limiter(t, f, clock, lim)
			s.lose.Store(true)
			if d := l.Decide(clientRequest("k")); d.Outcome != core.OutcomeFallback || !d.Result.Allowed {
				t.Fatalf("a call whose reply was lost: %v %+v, want a local admission", d.Outcome, d.Result)
			}
			if keys, _ := f.Debts(); keys != int(c.wantOwe) {
				t.Errorf("%d keys owing after the loss, want %d", keys, c.wantOwe)
			}
			l.Decide(clientRequest("other")) // the backend answers
			settled(t, f)
			if c.settle && (len(owes) != 1 || owes[0] != 1) {
				t.Errorf("settled with %v, want once with 1 owed", owes)
			}
			if r, _ := s.Store.Peek(context.Background(), "3:api:k", 0, specs(lim)...); lim.Rate-r.Remaining != c.wantStore {
				t.Errorf("the backend charged %d, want %d", lim.Rate-r.Remaining, c.wantStore)
			}
			if keys, _ := f.Debts(); keys != 0 {
				t.Errorf("%d keys still owing after settling", keys)
			}
		})
	}
}

// Answers can be handled out of the order the store gave them (replies on
// several connections, a process short of CPU): an older answer, claiming
// more left than the newer one it follows, does not widen what the
// fallback admits once the store is away.
func TestFallbackIgnoresStaleAnswers(t *testing.T) {
	for _, lim := range []store.Limit{
		{Algorithm: store.FixedWindow, Rate: 5, Period: time.Minute},
		{Algorithm: store.GCRA, Rate: 5, Period: time.Minute, Burst: 5},
	} {
		t.Run(string(lim.Algorithm), func(t *testing.T) {
			clock := newFakeClock(time.Unix(1_700_000_000, 0))
			l, s, f := fallbackLimiter(t, clock, lim)
			first := l.Decide(clientRequest("a"))
			if n, _ := decideN(l, "a", 1); n != 1 || first.Action != core.Serve {
				t.Fatalf("store admitted %d of 2", n+1)
			}
			// The first Take's answer (4 left) is handled after the
			// second's (3 left).
			f.remember("3:api:a", &first.Result, specs(lim), ticket{})
			s.down.Store(true)
			if n, _ := decideN(l, "a", 5); n != 3 {
				t.Errorf("the fallback admitted %d with 3 left, want 3", n)
			}
		})
	}
}
