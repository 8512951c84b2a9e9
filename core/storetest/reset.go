package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/store"
)

// resetLimits are the limits the Reset case exhausts: every algorithm, each
// with a penalty far longer than the case.
func resetLimits() []store.Limit {
	var out []store.Limit
	for _, a := range []store.Algorithm{store.GCRA, store.TokenBucket, store.FixedWindow, store.SlidingWindow, store.SlidingLog, store.LeakyBucket} {
		out = append(out, store.Limit{Algorithm: a, Rate: 5, Period: time.Hour, Penalty: 15 * time.Minute})
	}
	return out
}

// testReset checks Reset: a key
// exhausted and locked through one instance, then Reset through the other,
// gets exactly what a fresh key gets; other keys keep their state; bad
// input fails like Take.
func (s *suite) testReset(t *testing.T) {
	stores := s.stores(t)
	r := stores[1]
	limits := resetLimits()
	warmUp(t, limits, stores[:]...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, l := range limits {
		t.Run(string(l.Algorithm), func(t *testing.T) { s.testResetOne(t, ctx, stores, r, l) })
	}
	t.Run("SeveralLimits", func(t *testing.T) { testResetSeveral(t, ctx, stores, r, limits) })
	t.Run("BadInput", func(t *testing.T) { testResetBadInput(t, ctx, r, limits[:1]) })
}

// testResetOne exhausts two keys under l through stores[0], resets one
// through r (stores[1]), and checks that it then gets what a fresh key gets
// and that the other is still locked.
func (s *suite) testResetOne(t *testing.T, ctx context.Context, stores [2]store.Store, r store.Store, l store.Limit) {
	key, other := newKey(t), newKey(t)
	exhaust(t, stores[0], key, l)
	exhaust(t, stores[0], other, l)
	if err := r.Reset(ctx, key, specs([]store.Limit{l})...); err != nil {
		t.Fatalf("Reset: %v", err)
	}
	got := takeAfterReset(t, stores[0], key, l)
	want := mustTake(t, stores[0], newKey(t), 1, l)
	if d := diffResult(got, want, s.tolerance()); len(d) > 0 {
		t.Errorf("after Reset: %v\n\tgot  %s\n\twant %s (a fresh key's)", d, fmtResult(got), fmtResult(want))
	}
	if res := mustTake(t, stores[1], other, 1, l); res.Allowed || res.RetryAfter < 14*time.Minute {
		t.Errorf("another key after Reset: %s, want still locked", fmtResult(res))
	}
}

// testResetSeveral exhausts one key under every limit through stores[1],
// resets them all in one call, and checks that the key is admitted again;
// resetting a key without state says so (store.ErrNotFound).
func testResetSeveral(t *testing.T, ctx context.Context, stores [2]store.Store, r store.Store, limits []store.Limit) {
	key := newKey(t)
	for _, l := range limits {
		exhaust(t, stores[1], key, l)
	}
	if err := r.Reset(ctx, key, specs(limits)...); err != nil {
		t.Fatalf("Reset: %v", err)
	}
	got := takeAfterReset(t, stores[0], key, limits...)
	if !got.Allowed || got.Remaining != 4 {
		t.Errorf("after Reset of every limit: %s, want allowed with 4 remaining", fmtResult(got))
	}
	if err := r.Reset(ctx, newKey(t), specs(limits)...); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Reset of a key without state: %v, want store.ErrNotFound", err)
	}
}

// testResetBadInput: Reset rejects an empty key, no limits and an invalid
// limit with Take's errors; valid is a valid limit.
func testResetBadInput(t *testing.T, ctx context.Context, r store.Store, valid []store.Limit) {
	for _, c := range []struct {
		key    string
		limits []store.Limit
		want   error
	}{
		{"", valid, store.ErrEmptyKey},
		{"k", nil, store.ErrInvalidLimit},
		{"k", []store.Limit{{Rate: -1, Period: time.Second}}, store.ErrInvalidLimit},
	} {
		if err := r.Reset(ctx, c.key, specs(c.limits)...); !errors.Is(err, c.want) {
			t.Errorf("Reset(%q, %v): %v, want %v", c.key, c.limits, err, c.want)
		}
	}
}

// resetDelay is how long after Reset returns a store may still answer from
// what it kept locally (a deny cache that hears of resets asynchronously).
const resetDelay = time.Second

// takeAfterReset takes 1 for key until it is allowed, for at most
// resetDelay, and returns the first allowed Result (or the last denial).
// Before the store has dropped what it kept of key, Takes are denied
// without charging.
func takeAfterReset(tb testing.TB, st store.Store, key string, limits ...store.Limit) store.Result {
	tb.Helper()
	deadline := time.Now().Add(resetDelay)
	for {
		res := mustTake(tb, st, key, 1, limits...)
		if res.Allowed || time.Now().After(deadline) {
			return res
		}
		time.Sleep(time.Millisecond)
	}
}

// exhaust spends l's allowance for key and makes one more request, which
// the penalty turns into a lock.
func exhaust(tb testing.TB, st store.Store, key string, l store.Limit) {
	tb.Helper()
	for i := 0; ; i++ {
		res := mustTake(tb, st, key, 1, l)
		if !res.Allowed {
			if res.RetryAfter < 14*time.Minute {
				tb.Fatalf("%v: denied with retry %v, want the 15m lock", l, res.RetryAfter)
			}
			return
		}
		if i > int(l.Rate) {
			tb.Fatalf("%v: still allowed after %d requests", l, i+1)
		}
	}
}

// tolerance is how far apart two durations measured a moment apart may be:
// nothing on a controlled clock, a generous margin on the wall clock.
func (s *suite) tolerance() time.Duration {
	if s.exact {
		return 0
	}
	return time.Second
}
