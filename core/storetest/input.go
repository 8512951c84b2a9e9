package storetest

import (
	"errors"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/store"
)

// badInput is a Take that must fail with an error wrapping want.
type badInput struct {
	name   string
	key    string
	n      int64
	limits []store.Limit
	want   error
}

// badInputs returns every kind of bad input, on key, good being a valid limit.
func badInputs(key string, good store.Limit) []badInput {
	return []badInput{
		{"empty key", "", 1, []store.Limit{good}, store.ErrEmptyKey},
		{"negative cost", key, -1, []store.Limit{good}, store.ErrNegativeCost},
		{"most negative cost", key, math.MinInt64, []store.Limit{good}, store.ErrNegativeCost},
		{"no limits", key, 1, nil, store.ErrInvalidLimit},
		{"zero limit", key, 1, []store.Limit{{}}, store.ErrInvalidLimit},
		{"zero rate", key, 1, []store.Limit{{Rate: 0, Period: time.Second}}, store.ErrInvalidLimit},
		{"negative rate", key, 1, []store.Limit{{Rate: -1, Period: time.Second}}, store.ErrInvalidLimit},
		{"zero period", key, 1, []store.Limit{{Rate: 1}}, store.ErrInvalidLimit},
		{"negative period", key, 1, []store.Limit{{Rate: 1, Period: -time.Second}}, store.ErrInvalidLimit},
		{"sub-microsecond period", key, 1, []store.Limit{{Rate: 1, Period: 1500 * time.Nanosecond}}, store.ErrInvalidLimit},
		{"negative burst", key, 1, []store.Limit{{Rate: 1, Period: time.Second, Burst: -1}}, store.ErrInvalidLimit},
		{"negative penalty", key, 1, []store.Limit{{Rate: 1, Period: time.Second, Penalty: -time.Second}}, store.ErrInvalidLimit},
		{"unknown algorithm", key, 1, []store.Limit{{Algorithm: "bogus", Rate: 1, Period: time.Second}}, store.ErrInvalidLimit},
		{"burst on fixed window", key, 1, []store.Limit{{Algorithm: store.FixedWindow, Rate: 1, Period: time.Second, Burst: 2}}, store.ErrInvalidLimit},
		{"burst on sliding window", key, 1, []store.Limit{{Algorithm: store.SlidingWindow, Rate: 1, Period: time.Second, Burst: 2}}, store.ErrInvalidLimit},
		{"burst on sliding log", key, 1, []store.Limit{{Algorithm: store.SlidingLog, Rate: 1, Period: time.Second, Burst: 2}}, store.ErrInvalidLimit},
		{"sliding log too large", key, 1, []store.Limit{{Algorithm: store.SlidingLog, Rate: 100_000 + 1, Period: time.Hour}}, store.ErrInvalidLimit},
		{"gcra faster than 1/µs", key, 1, []store.Limit{{Algorithm: store.GCRA, Rate: 2, Period: time.Microsecond}}, store.ErrInvalidLimit},
		{"token bucket too large", key, 1, []store.Limit{{Algorithm: store.TokenBucket, Rate: 1 << 40, Period: time.Hour}}, store.ErrInvalidLimit},
		{"one invalid among valid", key, 1, []store.Limit{good, {Rate: 1, Period: -1}}, store.ErrInvalidLimit},
	}
}

// testBadInput: bad input is an error wrapping the documented sentinel,
// never a panic, and charges nothing.
func (s *suite) testBadInput(t *testing.T) {
	st := s.h.NewStore(t)
	key := newKey(t)
	good := store.Limit{Algorithm: store.FixedWindow, Rate: 5, Period: time.Hour}
	before := s.keySet(t)

	for _, c := range badInputs(key, good) {
		_, err := take(t, st, c.key, c.n, c.limits...)
		switch {
		case err == nil:
			t.Errorf("%s: Take(%q, %d, %v) = nil error, want %v", c.name, c.key, c.n, c.limits, c.want)
		case !errors.Is(err, c.want):
			t.Errorf("%s: Take(%q, %d, %v) = %v, want an error wrapping %v", c.name, c.key, c.n, c.limits, err, c.want)
		}
	}
	if res := mustTake(t, st, key, 0, good); !res.Allowed || res.Remaining != 5 {
		t.Errorf("after rejected calls, a peek = %s; want allowed with remaining 5: bad input must charge nothing", fmtResult(res))
	}
	s.expectNoNewKeys(t, before, "after bad input and a peek")
	t.Run("HugeCost", func(t *testing.T) { testHugeCost(t, st) })
}

// testHugeCost: a cost no limit can ever admit is a plain denial,
// RetryAfter INF, not an error, whatever its size (a store must not
// overflow n·T or n·P).
func testHugeCost(t *testing.T, st store.Store) {
	for _, lim := range hourLimits(5) {
		key := newKey(t)
		for _, n := range []int64{math.MaxInt64, 1 << 53, 1<<53 + 1, 6} {
			got := mustTake(t, st, key, n, lim)
			want := deny(5, 5, inf, 0)
			if d := diffResult(got, want, 0); len(d) > 0 {
				t.Errorf("%v, n=%d: %v\n\tgot  %s\n\twant %s", lim, n, d, fmtResult(got), fmtResult(want))
			}
		}
		if got := mustTake(t, st, key, 0, lim); !got.Allowed || got.Remaining != 5 {
			t.Errorf("%v: peek after huge costs = %s, want allowed with remaining 5", lim, fmtResult(got))
		}
	}
}

// hourLimits returns one limit of each algorithm admitting exactly c at once
// (Limit = Remaining = c on a fresh key), with periods so long that time
// passing during a test never adds allowance.
func hourLimits(c int64) []store.Limit {
	return everyAlgorithm(c, time.Hour)
}

// everyAlgorithm returns one limit of each algorithm with period p admitting
// exactly c at once (Limit = Remaining = c on a fresh key).
func everyAlgorithm(c int64, p time.Duration) []store.Limit {
	return []store.Limit{
		{Algorithm: store.GCRA, Rate: c, Period: p, Burst: c},
		{Algorithm: store.TokenBucket, Rate: c, Period: p, Burst: c},
		{Algorithm: store.LeakyBucket, Rate: c, Period: p, Burst: c - 1},
		{Algorithm: store.FixedWindow, Rate: c, Period: p},
		{Algorithm: store.SlidingWindow, Rate: c, Period: p},
		{Algorithm: store.SlidingLog, Rate: c, Period: p},
	}
}

// testIsolation: different keys and different limits never share state,
// including keys a naive encoding of the storage key would confuse.
func (s *suite) testIsolation(t *testing.T) {
	st := s.h.NewStore(t)
	key := newKey(t)
	lock := store.Limit{Algorithm: store.FixedWindow, Rate: 1, Period: time.Hour, Penalty: time.Hour}
	mustTake(t, st, key, 1, lock)
	if res := mustTake(t, st, key, 1, lock); res.Allowed {
		t.Fatalf("second Take of %v = %s, want denied", lock, fmtResult(res))
	}
	others := []string{
		key + ":x", key + ":", key + "x", key[:len(key)-1], "{" + key + "}", key + "}",
		key + "\x00", strings.ToUpper(key), " " + key, key + "\n",
		"ключ-" + key, strings.Repeat("k", 4096) + key,
	}
	for _, k := range others {
		if res := mustTake(t, st, k, 0, lock); !res.Allowed || res.Remaining != 1 {
			t.Errorf("key %.40q shares state with %q: peek = %s", k, key, fmtResult(res))
		}
	}
	// Limits that differ in any field keep separate state on one key.
	for _, l := range []store.Limit{
		{Algorithm: store.FixedWindow, Rate: 1, Period: time.Hour},
		{Algorithm: store.FixedWindow, Rate: 1, Period: time.Hour, Penalty: time.Minute},
		{Algorithm: store.FixedWindow, Rate: 1, Period: 2 * time.Hour, Penalty: time.Hour},
		{Algorithm: store.SlidingWindow, Rate: 1, Period: time.Hour, Penalty: time.Hour},
		{Algorithm: store.SlidingLog, Rate: 1, Period: time.Hour, Penalty: time.Hour},
		{Algorithm: store.GCRA, Rate: 1, Period: time.Hour, Burst: 1, Penalty: time.Hour},
	} {
		if res := mustTake(t, st, key, 0, l); !res.Allowed || res.Remaining != 1 {
			t.Errorf("%v shares state with %v on one key: peek = %s", l, lock, fmtResult(res))
		}
	}
	// The same limit on the same key, through another instance, does share it.
	if res := mustTake(t, s.h.NewStore(t), key, 0, lock); res.Allowed {
		t.Errorf("%v on %q through a second store instance = %s, want denied (locked)", lock, key, fmtResult(res))
	}
}

// testConcurrency: two store instances × 200 goroutines on one key admit
// exactly the allowance of 100 (Light: × 50 for 25), for every algorithm.
func (s *suite) testConcurrency(t *testing.T) {
	allowance, perStore := int64(100), 200
	if s.h.Light {
		allowance, perStore = 25, 50
	}
	for _, lim := range concurrencyLimits(allowance) {
		lim := lim
		t.Run(string(lim.Algorithm), func(t *testing.T) {
			stores := s.stores(t)
			key := newKey(t)
			var allowed, errs atomic.Int64
			var firstErr atomic.Value
			var wg sync.WaitGroup
			start := make(chan struct{})
			for _, st := range stores {
				for g := 0; g < perStore; g++ {
					wg.Add(1)
					go func(st store.Store) {
						defer wg.Done()
						<-start
						res, err := take(t, st, key, 1, lim)
						switch {
						case err != nil:
							errs.Add(1)
							firstErr.CompareAndSwap(nil, err.Error())
						case res.Allowed:
							allowed.Add(1)
						}
					}(st)
				}
			}
			close(start)
			wg.Wait()
			if n := errs.Load(); n > 0 {
				t.Fatalf("%d of %d concurrent Takes failed; first: %v", n, 2*perStore, firstErr.Load())
			}
			if got := allowed.Load(); got != allowance {
				t.Errorf("%v: %d of %d concurrent Takes allowed, want exactly %d", lim, got, 2*perStore, allowance)
			}
			if res := mustTake(t, stores[0], key, 0, lim); res.Remaining != 0 {
				t.Errorf("%v: peek after the rush = %s, want remaining 0", lim, fmtResult(res))
			}
		})
	}
}

// concurrencyLimits returns everyAlgorithm's limits with a 1000-hour period
// (no refill while the test runs). On a wall clock the period is chosen so
// that no epoch-aligned window boundary falls within the next minute.
func concurrencyLimits(c int64) []store.Limit {
	p := 1000 * time.Hour
	if time.Duration(time.Now().UnixNano())%p > p-time.Minute {
		p -= time.Hour
	}
	return everyAlgorithm(c, p)
}
