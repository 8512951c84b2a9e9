package memorystore_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"math"
	"math/rand"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/store"
)

// Every expectation below is computed by hand from ALGORITHMS.md; the
// comments show the arithmetic (µs unless a unit is given).

// memClock is a fake clock; it starts on an instant aligned to the hour.
type memClock struct {
	mu sync.Mutex
	t  time.Time
}

var memEpoch = time.Unix(1_699_999_200, 0) // 472222 h since the Unix epoch

func (c *memClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *memClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func newMemStore(opts ...memorystore.Option) (*memorystore.Store, *memClock) {
	clock := &memClock{t: memEpoch}
	opts = append([]memorystore.Option{memorystore.WithClock(clock.Now)}, opts...)
	return memorystore.New(opts...), clock
}

func memTake(t testing.TB, s *memorystore.Store, key string, n int64, limits ...store.Limit) store.Result {
	t.Helper()
	res, err := s.Take(context.Background(), key, n, specs(limits...)...)
	if err != nil {
		t.Fatalf("Take(%q, %d, %v): %v", key, n, limits, err)
	}
	return res
}

// memWant is the part of a Result a step asserts.
type memWant struct {
	allowed          bool
	limit, remaining int64
	retry, reset     time.Duration
	delay            time.Duration
}

func checkResult(t testing.TB, what string, got store.Result, w memWant) {
	t.Helper()
	if got.Allowed != w.allowed || got.Limit != w.limit || got.Remaining != w.remaining ||
		got.RetryAfter != w.retry || got.ResetAfter != w.reset || got.Delay != w.delay {
		t.Errorf("%s: got allowed=%v limit=%d remaining=%d retry=%v reset=%v delay=%v\n"+
			"           want allowed=%v limit=%d remaining=%d retry=%v reset=%v delay=%v",
			what, got.Allowed, got.Limit, got.Remaining, got.RetryAfter, got.ResetAfter, got.Delay,
			w.allowed, w.limit, w.remaining, w.retry, w.reset, w.delay)
	}
}

const us = time.Microsecond

func TestMemoryGCRA(t *testing.T) {
	t.Run("redis-cell example", func(t *testing.T) {
		s, clock := newMemStore()
		l := store.Limit{Algorithm: store.GCRA, Rate: 30, Period: time.Minute, Burst: 16}
		// T = 2s, dvt = 32s.
		checkResult(t, "take 1", memTake(t, s, "k", 1, l), memWant{true, 16, 15, 0, 2 * time.Second, 0})
		for i := 2; i <= 16; i++ {
			r := memTake(t, s, "k", 1, l)
			checkResult(t, fmt.Sprintf("take %d", i), r,
				memWant{true, 16, int64(16 - i), 0, time.Duration(i) * 2 * time.Second, 0})
		}
		// newTat = now+34s, 34s - 32s = 2s; used = tat - now = 32s.
		checkResult(t, "take 17", memTake(t, s, "k", 1, l), memWant{false, 16, 0, 2 * time.Second, 32 * time.Second, 0})
		clock.Advance(2*time.Second - us)
		// used = 30s+1µs: remaining floor((2s-1µs)/2s) = 0; retry 1µs.
		checkResult(t, "1µs early", memTake(t, s, "k", 1, l), memWant{false, 16, 0, us, 30*time.Second + us, 0})
		clock.Advance(us)
		checkResult(t, "on time", memTake(t, s, "k", 1, l), memWant{true, 16, 0, 0, 32 * time.Second, 0})
	})
	t.Run("one per two seconds", func(t *testing.T) {
		s, _ := newMemStore()
		l := store.Limit{Algorithm: store.GCRA, Rate: 1, Period: 2 * time.Second, Burst: 1}
		checkResult(t, "first", memTake(t, s, "k", 1, l), memWant{true, 1, 0, 0, 2 * time.Second, 0})
		checkResult(t, "second", memTake(t, s, "k", 1, l), memWant{false, 1, 0, 2 * time.Second, 2 * time.Second, 0})
	})
	t.Run("cost above burst never passes", func(t *testing.T) {
		s, _ := newMemStore()
		l := store.Limit{Rate: 10, Period: time.Second, Burst: 4} // zero Algorithm is GCRA
		checkResult(t, "n=5", memTake(t, s, "k", 5, l), memWant{false, 4, 4, store.InfDuration, 0, 0})
		// T = 100ms: n=4 uses all of dvt = 400ms.
		checkResult(t, "n=4", memTake(t, s, "k", 4, l), memWant{true, 4, 0, 0, 400 * time.Millisecond, 0})
	})
	t.Run("interval rounds up", func(t *testing.T) {
		s, clock := newMemStore()
		l := store.Limit{Algorithm: store.GCRA, Rate: 3, Period: time.Second, Burst: 1}
		// T = ceil(1e6/3) = 333334, dvt = T.
		checkResult(t, "first", memTake(t, s, "k", 1, l), memWant{true, 1, 0, 0, 333334 * us, 0})
		clock.Advance(333333 * us)
		checkResult(t, "1µs early", memTake(t, s, "k", 1, l), memWant{false, 1, 0, us, us, 0})
	})
}

func TestMemoryLeakyBucket(t *testing.T) {
	s, clock := newMemStore()
	l := store.Limit{Algorithm: store.LeakyBucket, Rate: 10, Period: time.Second, Burst: 3}
	// T = 100ms, limit = B+1 = 4, cap = 400ms. The delays are 0, T, 2T, 3T.
	for i := 0; i < 4; i++ {
		r := memTake(t, s, "k", 1, l)
		checkResult(t, fmt.Sprintf("take %d", i+1), r, memWant{
			allowed: true, limit: 4, remaining: int64(3 - i),
			reset: time.Duration(i+1) * 100 * time.Millisecond,
			delay: time.Duration(i) * 100 * time.Millisecond,
		})
	}
	// newTat - now = 500ms > 400ms: retry 100ms.
	checkResult(t, "take 5", memTake(t, s, "k", 1, l), memWant{false, 4, 0, 100 * time.Millisecond, 400 * time.Millisecond, 0})
	checkResult(t, "peek", memTake(t, s, "k", 0, l), memWant{true, 4, 0, 0, 400 * time.Millisecond, 0})
	clock.Advance(100 * time.Millisecond)
	// One left the queue: the next one waits behind the three queued.
	checkResult(t, "after T", memTake(t, s, "k", 1, l), memWant{true, 4, 0, 0, 400 * time.Millisecond, 300 * time.Millisecond})
	// n = 2 on a fresh key: delay = newTat - T - now = T.
	checkResult(t, "n=2", memTake(t, s, "k2", 2, l), memWant{true, 4, 2, 0, 200 * time.Millisecond, 100 * time.Millisecond})
	checkResult(t, "n=5", memTake(t, s, "k3", 5, l), memWant{false, 4, 4, store.InfDuration, 0, 0})
	// Burst 0 defaults to Rate: limit Rate+1.
	checkResult(t, "default burst", memTake(t, s, "k4", 1, store.Limit{Algorithm: store.LeakyBucket, Rate: 2, Period: time.Second}),
		memWant{true, 3, 2, 0, 500 * time.Millisecond, 0})
}

func TestMemoryTokenBucket(t *testing.T) {
	s, clock := newMemStore()
	l := store.Limit{Algorithm: store.TokenBucket, Rate: 3, Period: time.Second, Burst: 3}
	// cap = 3e6, cost 1 = 1e6; the refill of 3 per 1e6 never divides evenly.
	checkResult(t, "n=3", memTake(t, s, "k", 3, l), memWant{true, 3, 0, 0, time.Second, 0})
	// n=2 at tok=0: retry ceil(2e6/3) = 666667.
	checkResult(t, "n=2 empty", memTake(t, s, "k", 2, l), memWant{false, 3, 0, 666667 * us, time.Second, 0})
	clock.Advance(333333 * us)
	// tok = 999999: retry ceil(1/3) = 1, reset ceil(2000001/3) = 666667.
	checkResult(t, "1µs early", memTake(t, s, "k", 1, l), memWant{false, 3, 0, us, 666667 * us, 0})
	clock.Advance(us)
	// tok = 1000002 → 2 after the charge; reset ceil(2999998/3) = 1000000.
	checkResult(t, "on time", memTake(t, s, "k", 1, l), memWant{true, 3, 0, 0, time.Second, 0})
	// The 2 leftover units count: the next token is due in ceil(999998/3) =
	// 333333; reset ceil(2999998/3) = 1000000.
	checkResult(t, "next", memTake(t, s, "k", 1, l), memWant{false, 3, 0, 333333 * us, time.Second, 0})
	clock.Advance(333333 * us)
	// tok = 2 + 999999 ≥ 1e6, 1 left after the charge.
	checkResult(t, "exact refill", memTake(t, s, "k", 1, l), memWant{true, 3, 0, 0, time.Second, 0})

	// Over a long run the refill is exact: in 10 s exactly 30 units pass.
	s2, clock2 := newMemStore()
	memTake(t, s2, "k", 3, l)
	passed := 0
	for i := 0; i < 10_000; i++ {
		clock2.Advance(time.Millisecond)
		if memTake(t, s2, "k", 1, l).Allowed {
			passed++
		}
	}
	if passed != 30 {
		t.Errorf("10s at 3/s after draining: %d passed, want 30", passed)
	}
	checkResult(t, "n above burst", memTake(t, s, "k9", 4, l), memWant{false, 3, 3, store.InfDuration, 0, 0})
}

func TestMemoryFixedWindow(t *testing.T) {
	s, clock := newMemStore()
	l := store.Limit{Algorithm: store.FixedWindow, Rate: 3, Period: time.Minute}
	checkResult(t, "peek fresh", memTake(t, s, "k", 0, l), memWant{true, 3, 3, 0, 0, 0})
	clock.Advance(50 * time.Second) // 10 s before the window ends
	for i := 1; i <= 3; i++ {
		checkResult(t, fmt.Sprintf("take %d", i), memTake(t, s, "k", 1, l),
			memWant{true, 3, int64(3 - i), 0, 10 * time.Second, 0})
	}
	checkResult(t, "take 4", memTake(t, s, "k", 1, l), memWant{false, 3, 0, 10 * time.Second, 10 * time.Second, 0})
	clock.Advance(10*time.Second - us)
	checkResult(t, "last µs", memTake(t, s, "k", 1, l), memWant{false, 3, 0, us, us, 0})
	clock.Advance(us)
	// A new window, aligned to the epoch: 3 more pass at once.
	checkResult(t, "boundary", memTake(t, s, "k", 3, l), memWant{true, 3, 0, 0, time.Minute, 0})
	checkResult(t, "n above rate", memTake(t, s, "k2", 4, l), memWant{false, 3, 3, store.InfDuration, 0, 0})
}

func TestMemorySlidingWindow(t *testing.T) {
	l := store.Limit{Algorithm: store.SlidingWindow, Rate: 10, Period: time.Second}
	t.Run("retry in this window", func(t *testing.T) {
		s, clock := newMemStore()
		checkResult(t, "fill", memTake(t, s, "k", 10, l), memWant{true, 10, 0, 0, 2 * time.Second, 0})
		clock.Advance(1250 * time.Millisecond)
		// p = 10, e = 250000: p·(P-e) = 7.5e6; +1e6 ≤ 1e7.
		// remaining floor((1e7 - 7.5e6 - 1e6)/1e6) = 1; reset 2P - e = 1.75s.
		checkResult(t, "take 1", memTake(t, s, "k", 1, l), memWant{true, 10, 1, 0, 1750 * time.Millisecond, 0})
		checkResult(t, "take 2", memTake(t, s, "k", 1, l), memWant{true, 10, 0, 0, 1750 * time.Millisecond, 0})
		// 7.5e6 + 3e6 > 1e7. e1 = P - floor((10-2-1)·1e6/10) = 300000: retry 50ms.
		checkResult(t, "take 3", memTake(t, s, "k", 1, l), memWant{false, 10, 0, 50 * time.Millisecond, 1750 * time.Millisecond, 0})
		clock.Advance(50*time.Millisecond - us)
		checkResult(t, "1µs early", memTake(t, s, "k", 1, l), memWant{false, 10, 0, us, 1700*time.Millisecond + us, 0})
		clock.Advance(us)
		checkResult(t, "on time", memTake(t, s, "k", 1, l), memWant{true, 10, 0, 0, 1700 * time.Millisecond, 0})
	})
	t.Run("retry in next window", func(t *testing.T) {
		s, clock := newMemStore()
		memTake(t, s, "k", 10, l)
		clock.Advance(500 * time.Millisecond)
		// c = 10: R-c-n < 0. e2 = P - floor(9e6/10) = 100000: retry (P-e) + e2 = 600ms.
		checkResult(t, "denied", memTake(t, s, "k", 1, l), memWant{false, 10, 0, 600 * time.Millisecond, 1500 * time.Millisecond, 0})
		clock.Advance(600*time.Millisecond - us)
		// Next window, e = 99999, p = 10: 10·900001 + 1e6 > 1e7.
		// remaining floor((1e7 - 9000010)/1e6) = 0; reset P - e = 900001.
		checkResult(t, "1µs early", memTake(t, s, "k", 1, l), memWant{false, 10, 0, us, 900001 * us, 0})
		clock.Advance(us)
		checkResult(t, "on time", memTake(t, s, "k", 1, l), memWant{true, 10, 0, 0, 1900 * time.Millisecond, 0})
	})
	t.Run("previous window forgotten after two", func(t *testing.T) {
		s, clock := newMemStore()
		memTake(t, s, "k", 10, l)
		clock.Advance(2 * time.Second)
		checkResult(t, "peek", memTake(t, s, "k", 0, l), memWant{true, 10, 10, 0, 0, 0})
		checkResult(t, "n above rate", memTake(t, s, "k", 11, l), memWant{false, 10, 10, store.InfDuration, 0, 0})
	})
}

func TestMemorySlidingLog(t *testing.T) {
	l := store.Limit{Algorithm: store.SlidingLog, Rate: 3, Period: time.Second}
	t.Run("exact", func(t *testing.T) {
		s, clock := newMemStore()
		for i := 0; i < 3; i++ {
			// reset = newest + P - now = 1s.
			checkResult(t, fmt.Sprintf("take %d", i+1), memTake(t, s, "k", 1, l), memWant{true, 3, int64(2 - i), 0, time.Second, 0})
			clock.Advance(100 * time.Millisecond)
		}
		// now = t0+300ms: retry = ts[0] + P - now = 700ms; reset = t0+200ms + 1s - now.
		checkResult(t, "take 4", memTake(t, s, "k", 1, l), memWant{false, 3, 0, 700 * time.Millisecond, 900 * time.Millisecond, 0})
		// n = 2: retry = ts[1] + P - now = 800ms.
		checkResult(t, "n=2", memTake(t, s, "k", 2, l), memWant{false, 3, 0, 800 * time.Millisecond, 900 * time.Millisecond, 0})
		clock.Advance(700*time.Millisecond - us)
		checkResult(t, "1µs early", memTake(t, s, "k", 1, l), memWant{false, 3, 0, us, 200*time.Millisecond + us, 0})
		clock.Advance(us)
		// ts[0] = now - P is out: one slot, then the log is full again.
		checkResult(t, "on time", memTake(t, s, "k", 1, l), memWant{true, 3, 0, 0, time.Second, 0})
		checkResult(t, "full again", memTake(t, s, "k", 1, l), memWant{false, 3, 0, 100 * time.Millisecond, time.Second, 0})
	})
	t.Run("same microsecond", func(t *testing.T) {
		s, clock := newMemStore()
		checkResult(t, "n=2", memTake(t, s, "k", 2, l), memWant{true, 3, 1, 0, time.Second, 0})
		clock.Advance(10 * time.Millisecond)
		checkResult(t, "n=1", memTake(t, s, "k", 1, l), memWant{true, 3, 0, 0, time.Second, 0})
		// Both units of the first take leave together, at t0 + 1s.
		checkResult(t, "n=2 denied", memTake(t, s, "k", 2, l), memWant{false, 3, 0, 990 * time.Millisecond, time.Second, 0})
		clock.Advance(990 * time.Millisecond)
		checkResult(t, "peek", memTake(t, s, "k", 0, l), memWant{true, 3, 2, 0, 10 * time.Millisecond, 0})
		checkResult(t, "n=2", memTake(t, s, "k", 2, l), memWant{true, 3, 0, 0, time.Second, 0})
		checkResult(t, "n above rate", memTake(t, s, "k", 4, l), memWant{false, 3, 0, store.InfDuration, time.Second, 0})
	})
	t.Run("clock behind newest entry", func(t *testing.T) {
		s, clock := newMemStore()
		clock.Advance(time.Second)
		memTake(t, s, "k", 1, l)
		clock.Advance(-500 * time.Millisecond)
		// Stamps never go below the newest: the new entry is stamped t0+1s,
		// so reset = newest + P - now = 1.5s.
		checkResult(t, "behind", memTake(t, s, "k", 1, l), memWant{true, 3, 1, 0, 1500 * time.Millisecond, 0})
	})
}

// A request of any cost is one entry of the log (issue 20, point 3): a
// Take of the largest cost a log admits allocates as little as a Take of 1
// (a unit per entry allocated 800 KB and wrote 100,000 stamps), and the
// figures stay exact: the retry of a denial names the stamp of the unit
// that must leave, inside a request of many units.
func TestMemorySlidingLogCostIsOneEntry(t *testing.T) {
	R := int64(100_000)
	l := store.Limit{Algorithm: store.SlidingLog, Rate: R, Period: time.Hour}
	s, _ := newMemStore()
	memTake(t, s, "warm", R, l)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	checkResult(t, "cost R", memTake(t, s, "k", R, l), memWant{true, R, 0, 0, time.Hour, 0})
	runtime.ReadMemStats(&after)
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 64<<10 {
		t.Errorf("one Take of cost %d allocated %d bytes, want under 64 KB", R, grew)
	}
	s, clock := newMemStore()
	memTake(t, s, "k", 1, l)
	clock.Advance(time.Minute)
	memTake(t, s, "k", R-2, l)
	clock.Advance(time.Minute)
	memTake(t, s, "k", 1, l)
	clock.Advance(time.Minute)
	// Full. Cost 1: the first unit (t0) leaves first; cost 2: the second,
	// the first of the request of R-2 (t0+1m); cost R: the last (t0+2m).
	checkResult(t, "cost 1", memTake(t, s, "k", 1, l), memWant{false, R, 0, 57 * time.Minute, 59 * time.Minute, 0})
	checkResult(t, "cost 2", memTake(t, s, "k", 2, l), memWant{false, R, 0, 58 * time.Minute, 59 * time.Minute, 0})
	checkResult(t, "cost R-1", memTake(t, s, "k", R-1, l), memWant{false, R, 0, 58 * time.Minute, 59 * time.Minute, 0})
	checkResult(t, "cost R", memTake(t, s, "k", R, l), memWant{false, R, 0, 59 * time.Minute, 59 * time.Minute, 0})
	clock.Advance(57 * time.Minute) // the first unit leaves
	checkResult(t, "cost 1 again", memTake(t, s, "k", 1, l), memWant{true, R, 0, 0, time.Hour, 0})
}

func TestMemoryPenalty(t *testing.T) {
	s, clock := newMemStore()
	l := store.Limit{Algorithm: store.GCRA, Rate: 1, Period: time.Second, Burst: 1, Penalty: 10 * time.Second}
	checkResult(t, "take 1", memTake(t, s, "k", 1, l), memWant{true, 1, 0, 0, time.Second, 0})
	// The algorithm denies (retry 1s): the lock is set, retry = max(1s, 10s).
	checkResult(t, "denied", memTake(t, s, "k", 1, l), memWant{false, 1, 0, 10 * time.Second, 10 * time.Second, 0})
	for i := 0; i < 5; i++ {
		clock.Advance(time.Second)
		// Locked: retry is what is left of the lock, never extended.
		left := time.Duration(9-i) * time.Second
		checkResult(t, "locked", memTake(t, s, "k", 1, l), memWant{false, 1, 0, left, left, 0})
	}
	checkResult(t, "locked peek", memTake(t, s, "k", 0, l), memWant{false, 1, 0, 5 * time.Second, 5 * time.Second, 0})
	clock.Advance(5*time.Second - us)
	checkResult(t, "last µs", memTake(t, s, "k", 1, l), memWant{false, 1, 0, us, us, 0})
	clock.Advance(us)
	// Nothing was charged during the lock: the full burst is there.
	checkResult(t, "unlocked", memTake(t, s, "k", 1, l), memWant{true, 1, 0, 0, time.Second, 0})

	t.Run("peek never locks", func(t *testing.T) {
		s, _ := newMemStore()
		memTake(t, s, "k", 1, l)
		for i := 0; i < 3; i++ {
			checkResult(t, "peek", memTake(t, s, "k", 0, l), memWant{true, 1, 0, 0, time.Second, 0})
		}
	})
	t.Run("infinite retry stays infinite", func(t *testing.T) {
		s, _ := newMemStore()
		checkResult(t, "n=2", memTake(t, s, "k", 2, l), memWant{false, 1, 1, store.InfDuration, 10 * time.Second, 0})
		// The lock was set by that denial.
		checkResult(t, "locked", memTake(t, s, "k", 1, l), memWant{false, 1, 0, 10 * time.Second, 10 * time.Second, 0})
	})
	t.Run("reset covers a longer state", func(t *testing.T) {
		s, clock := newMemStore()
		lw := store.Limit{Algorithm: store.FixedWindow, Rate: 1, Period: time.Minute, Penalty: time.Second}
		memTake(t, s, "k", 1, lw)
		checkResult(t, "denied", memTake(t, s, "k", 1, lw), memWant{false, 1, 0, time.Minute, time.Minute, 0})
		clock.Advance(500 * time.Millisecond)
		// Locked for 500ms more; the window resets in 59.5s.
		checkResult(t, "locked", memTake(t, s, "k", 1, lw), memWant{false, 1, 0, 500 * time.Millisecond, 59500 * time.Millisecond, 0})
	})
	t.Run("leaky bucket locked reports no delay", func(t *testing.T) {
		s, _ := newMemStore()
		lk := store.Limit{Algorithm: store.LeakyBucket, Rate: 1, Period: time.Second, Burst: 1, Penalty: 3 * time.Second}
		checkResult(t, "1", memTake(t, s, "k", 1, lk), memWant{true, 2, 1, 0, time.Second, 0})
		checkResult(t, "2", memTake(t, s, "k", 1, lk), memWant{true, 2, 0, 0, 2 * time.Second, time.Second})
		checkResult(t, "3", memTake(t, s, "k", 1, lk), memWant{false, 2, 0, 3 * time.Second, 3 * time.Second, 0})
		checkResult(t, "4", memTake(t, s, "k", 1, lk), memWant{false, 2, 0, 3 * time.Second, 3 * time.Second, 0})
	})
}

func TestMemoryMultipleLimits(t *testing.T) {
	minute := store.Limit{Algorithm: store.FixedWindow, Rate: 5, Period: time.Minute}
	second := store.Limit{Algorithm: store.FixedWindow, Rate: 2, Period: time.Second}
	t.Run("no charge on deny", func(t *testing.T) {
		s, clock := newMemStore()
		r := memTake(t, s, "k", 1, minute, second)
		if !r.Allowed || r.Binding != 1 || r.Remaining != 1 || len(r.PerLimit) != 2 || r.PerLimit[0].Remaining != 4 {
			t.Fatalf("first take: %+v", r)
		}
		memTake(t, s, "k", 1, minute, second)
		r = memTake(t, s, "k", 1, minute, second)
		if r.Allowed || r.Binding != 1 || r.RetryAfter != time.Second {
			t.Fatalf("third take: %+v, want denied by limit 1 with retry 1s", r)
		}
		// The minute limit allowed but was not charged: it reports its peek.
		checkResult(t, "minute's figures", r.PerLimit[0], memWant{true, 5, 3, 0, time.Minute, 0})
		checkResult(t, "minute alone", memTake(t, s, "k", 0, minute), memWant{true, 5, 3, 0, time.Minute, 0})
		clock.Advance(time.Second)
		r = memTake(t, s, "k", 2, minute, second)
		if !r.Allowed || r.Binding != 1 || r.PerLimit[0].Remaining != 1 || r.PerLimit[1].Remaining != 0 {
			t.Fatalf("next second: %+v", r)
		}
		// Now the minute limit binds: cost 2 > 1 left.
		clock.Advance(time.Second)
		r = memTake(t, s, "k", 2, minute, second)
		if r.Allowed || r.Binding != 0 || r.RetryAfter != 58*time.Second {
			t.Fatalf("minute binds: %+v", r)
		}
		checkResult(t, "second's figures", r.PerLimit[1], memWant{true, 2, 2, 0, 0, 0})
	})
	t.Run("peek writes nothing", func(t *testing.T) {
		s, _ := newMemStore()
		for i := 0; i < 5; i++ {
			r := memTake(t, s, "k", 0, minute, second)
			if !r.Allowed || r.Remaining != 2 || r.ResetAfter != 0 {
				t.Fatalf("peek: %+v", r)
			}
		}
		if n := memorystore.Len(s); n != 0 {
			t.Fatalf("after peeks the store holds %d states, want 0", n)
		}
	})
	t.Run("penalty of the denying limit only", func(t *testing.T) {
		s, clock := newMemStore()
		strict := store.Limit{Algorithm: store.GCRA, Rate: 1, Period: time.Second, Burst: 1, Penalty: 5 * time.Second}
		loose := store.Limit{Algorithm: store.TokenBucket, Rate: 10, Period: time.Second, Penalty: time.Hour}
		memTake(t, s, "k", 1, loose, strict)
		r := memTake(t, s, "k", 1, loose, strict)
		if r.Allowed || r.Binding != 1 || r.RetryAfter != 5*time.Second {
			t.Fatalf("denied: %+v", r)
		}
		checkResult(t, "loose not charged", r.PerLimit[0], memWant{true, 10, 9, 0, 100 * time.Millisecond, 0})
		clock.Advance(time.Second)
		r = memTake(t, s, "k", 1, loose, strict)
		if r.Allowed || r.RetryAfter != 4*time.Second {
			t.Fatalf("locked: %+v", r)
		}
		// The loose limit has no lock: alone it passes.
		if r := memTake(t, s, "k", 1, loose); !r.Allowed {
			t.Fatalf("loose alone: %+v", r)
		}
	})
	t.Run("duplicate limit charged once", func(t *testing.T) {
		s, _ := newMemStore()
		sl := store.Limit{Algorithm: store.SlidingLog, Rate: 4, Period: time.Second}
		r := memTake(t, s, "k", 1, sl, sl) // a new state
		if !r.Allowed || r.Remaining != 3 {
			t.Fatalf("duplicate: %+v", r)
		}
		r = memTake(t, s, "k", 1, sl, sl) // an existing one
		if !r.Allowed || r.Remaining != 2 {
			t.Fatalf("duplicate: %+v", r)
		}
		if r := memTake(t, s, "k", 0, sl); r.Remaining != 2 {
			t.Fatalf("after duplicate takes: remaining %d, want 2", r.Remaining)
		}
	})
	t.Run("limits differing in penalty are separate", func(t *testing.T) {
		s, _ := newMemStore()
		a := store.Limit{Rate: 2, Period: time.Second}
		b := a
		b.Penalty = time.Second
		memTake(t, s, "k", 2, a)
		if r := memTake(t, s, "k", 1, b); !r.Allowed {
			t.Fatalf("limit with a penalty shares state with one without: %+v", r)
		}
	})
	t.Run("many limits", func(t *testing.T) {
		s, _ := newMemStore()
		var ls []store.Limit
		for i := 1; i <= 7; i++ {
			ls = append(ls, store.Limit{Algorithm: store.Algorithms()[i%len(store.Algorithms())], Rate: int64(10 * i), Period: time.Minute})
		}
		for i := 0; i < 10; i++ {
			if r := memTake(t, s, "k", 1, ls...); !r.Allowed {
				t.Fatalf("take %d: %+v", i+1, r)
			}
		}
		// The TokenBucket of 10 binds; every other limit reports its peek
		// after 10 units: its capacity less 10 (LeakyBucket 50: limit 51).
		r := memTake(t, s, "k", 1, ls...)
		if r.Allowed || r.Binding != 0 || len(r.PerLimit) != 7 {
			t.Fatalf("take 11: %+v", r)
		}
		wantRemaining := []int64{0, 10, 20, 30, 41, 50, 60}
		for i, pr := range r.PerLimit {
			if pr.Remaining != wantRemaining[i] || pr.Allowed != (i > 0) || pr.PerLimit != nil {
				t.Errorf("limit %d (%v): %+v, want remaining %d", i, ls[i], pr, wantRemaining[i])
			}
		}
	})
}

// The errors for bad keys, costs and limits are the conformance suite's
// (storetest, BadInput). What is particular to the memory store: a call
// whose first limit is valid and second is not stores no state, a done
// context is an error, a nil one is not, and a nil or zero store fails
// without panicking.
func TestMemoryBadInput(t *testing.T) {
	s, _ := newMemStore()
	ctx := context.Background()
	ok := store.PerSecond(1)
	if _, err := s.Take(ctx, "k", 1, specs(ok, store.Limit{Rate: 1, Period: time.Nanosecond})...); !errors.Is(err, store.ErrInvalidLimit) {
		t.Errorf("second limit invalid: err = %v, want ErrInvalidLimit", err)
	}
	if n := memorystore.Len(s); n != 0 {
		t.Errorf("bad input stored %d states", n)
	}

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.Take(cancelled, "k", 1, specs(ok)...); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled context: err = %v", err)
	}
	//lint:ignore SA1012 a nil context must not panic
	if _, err := s.Take(nil, "k", 1, specs(ok)...); err != nil {
		t.Errorf("nil context: %v", err)
	}

	var zero memorystore.Store
	if _, err := zero.Take(ctx, "k", 1, specs(ok)...); err == nil {
		t.Error("zero MemoryStore: no error")
	}
	var nilStore *memorystore.Store
	if _, err := nilStore.Take(ctx, "k", 1, specs(ok)...); err == nil {
		t.Error("nil MemoryStore: no error")
	}
	if memorystore.Len(nilStore) != 0 || memorystore.Len(&zero) != 0 {
		t.Error("Len of a nil or zero store is not 0")
	}
}

// TestMemoryHugeCost takes costs up to MaxInt64 on every algorithm, with
// limits as large as Validate accepts: never a panic, never an overflow.
func TestMemoryHugeCost(t *testing.T) {
	limits := []store.Limit{
		{Algorithm: store.GCRA, Rate: 1000, Period: time.Second, Burst: 1<<33 - 2},
		{Algorithm: store.LeakyBucket, Rate: 1, Period: time.Microsecond, Burst: 1<<53 - 3},
		{Algorithm: store.TokenBucket, Rate: 1 << 20, Period: time.Microsecond, Burst: 1 << 52},
		{Algorithm: store.FixedWindow, Rate: 1<<53 - 1, Period: (1<<53 - 1) * time.Microsecond},
		{Algorithm: store.SlidingWindow, Rate: 1 << 20, Period: 1 << 31 * time.Microsecond},
		{Algorithm: store.SlidingLog, Rate: 100_000, Period: 1 << 52 * time.Microsecond},
	}
	for _, l := range limits {
		if _, err := l.Spec(); err != nil {
			t.Fatalf("test limit invalid: %v", err)
		}
		sp, _ := l.Spec()
		capacity := sp.Rate()
		if sp.Burst() > 0 {
			capacity = sp.Burst()
		}
		if l.Algorithm == store.LeakyBucket {
			capacity++
		}
		s, _ := newMemStore()
		for _, n := range []int64{math.MaxInt64, math.MaxInt64 / 2, 1 << 62, 1 << 53, capacity + 1} {
			r := memTake(t, s, "k", n, l)
			if r.Allowed || r.RetryAfter != store.InfDuration || r.Remaining != capacity {
				t.Errorf("%v n=%d: %+v, want denied forever with %d remaining", l, n, r, capacity)
			}
		}
		if l.Algorithm == store.SlidingLog {
			continue // filling 100000 entries is covered elsewhere
		}
		r := memTake(t, s, "k", capacity, l)
		if !r.Allowed || r.Remaining != 0 || r.ResetAfter <= 0 || r.ResetAfter == store.InfDuration {
			t.Errorf("%v n=capacity: %+v", l, r)
		}
		r = memTake(t, s, "k", capacity, l)
		if r.Allowed || r.RetryAfter <= 0 || r.RetryAfter == store.InfDuration {
			t.Errorf("%v n=capacity again: %+v", l, r)
		}
	}
}

// TestMemoryRetryRemainingResetExact checks, on random traffic for every
// algorithm, the three promises of the figures: a denied request passes
// exactly RetryAfter later and not 1µs earlier; exactly Remaining more
// unit requests pass at once; the allowance is full exactly ResetAfter
// later and not 1µs earlier.
func TestMemoryRetryRemainingResetExact(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	limits := []store.Limit{
		{Algorithm: store.GCRA, Rate: 7, Period: time.Second, Burst: 5},
		{Algorithm: store.LeakyBucket, Rate: 7, Period: time.Second, Burst: 3},
		{Algorithm: store.TokenBucket, Rate: 7, Period: time.Second, Burst: 5},
		{Algorithm: store.FixedWindow, Rate: 7, Period: time.Second},
		{Algorithm: store.SlidingWindow, Rate: 7, Period: time.Second},
		{Algorithm: store.SlidingLog, Rate: 7, Period: time.Second},
	}
	for _, l := range limits {
		s, clock := newMemStore()
		clock.Advance(time.Duration(rng.Int63n(int64(time.Second))) / us * us)
		var denials, audits int
		for step := 0; step < 400; step++ {
			clock.Advance(time.Duration(rng.Int63n(300_000)) * us)
			n := 1 + rng.Int63n(3)
			r := memTake(t, s, "k", n, l)
			switch {
			case !r.Allowed && r.RetryAfter != store.InfDuration:
				denials++
				clock.Advance(r.RetryAfter - us)
				if early := memTake(t, s, "k", n, l); early.Allowed {
					t.Fatalf("%v step %d: n=%d passed 1µs before RetryAfter %v", l, step, n, r.RetryAfter)
				}
				clock.Advance(us)
				if late := memTake(t, s, "k", n, l); !late.Allowed {
					t.Fatalf("%v step %d: n=%d denied at RetryAfter %v: %+v", l, step, n, r.RetryAfter, late)
				}
			case r.Allowed && rng.Intn(4) == 0:
				audits++
				// Remaining: exactly that many unit requests pass now.
				peek := memTake(t, s, "k", 0, l)
				if peek.Remaining != r.Remaining {
					t.Fatalf("%v step %d: peek remaining %d != take remaining %d", l, step, peek.Remaining, r.Remaining)
				}
				for i := int64(0); i < r.Remaining; i++ {
					if !memTake(t, s, "k", 1, l).Allowed {
						t.Fatalf("%v step %d: unit %d of Remaining %d denied", l, step, i+1, r.Remaining)
					}
				}
				if memTake(t, s, "k", 1, l).Allowed {
					t.Fatalf("%v step %d: a unit beyond Remaining %d passed", l, step, r.Remaining)
				}
				// Reset: the allowance is full exactly ResetAfter later.
				full := memTake(t, s, "k", 0, l)
				if full.ResetAfter > 0 {
					clock.Advance(full.ResetAfter - us)
					if p := memTake(t, s, "k", 0, l); p.Remaining == p.Limit {
						t.Fatalf("%v step %d: full 1µs before ResetAfter %v", l, step, full.ResetAfter)
					}
					clock.Advance(us)
				}
				if p := memTake(t, s, "k", 0, l); p.Remaining != p.Limit || p.ResetAfter != 0 {
					t.Fatalf("%v step %d: not full at ResetAfter %v: %+v", l, step, full.ResetAfter, p)
				}
			}
		}
		if denials < 20 || audits < 20 {
			t.Errorf("%v: %d denials and %d audits: the traffic exercised too little", l, denials, audits)
		}
	}
}

// TestMemorySlidingLogNeverExceeds checks on random traffic that no
// trailing Period ever holds more than Rate admitted units.
func TestMemorySlidingLogNeverExceeds(t *testing.T) {
	const rate = 20
	l := store.Limit{Algorithm: store.SlidingLog, Rate: rate, Period: 100 * time.Millisecond}
	s, clock := newMemStore()
	rng := rand.New(rand.NewSource(3))
	var admitted []time.Time // one per unit
	for i := 0; i < 5000; i++ {
		clock.Advance(time.Duration(rng.Int63n(8000)) * us)
		n := 1 + rng.Int63n(4)
		if memTake(t, s, "k", n, l).Allowed {
			for j := int64(0); j < n; j++ {
				admitted = append(admitted, clock.Now())
			}
		}
	}
	for i := rate; i < len(admitted); i++ {
		if admitted[i].Sub(admitted[i-rate]) < 100*time.Millisecond {
			t.Fatalf("units %d and %d, %v apart, make %d in one period", i-rate, i, admitted[i].Sub(admitted[i-rate]), rate+1)
		}
	}
	if len(admitted) < 1000 {
		t.Fatalf("only %d units admitted: the test exercised too little", len(admitted))
	}
}

func TestMemoryConcurrentExactAllowance(t *testing.T) {
	limits := []store.Limit{
		{Algorithm: store.GCRA, Rate: 50, Period: time.Hour},
		{Algorithm: store.LeakyBucket, Rate: 50, Period: time.Hour, Burst: 49},
		{Algorithm: store.TokenBucket, Rate: 50, Period: time.Hour},
		{Algorithm: store.FixedWindow, Rate: 50, Period: time.Hour},
		{Algorithm: store.SlidingWindow, Rate: 50, Period: time.Hour},
		{Algorithm: store.SlidingLog, Rate: 50, Period: time.Hour},
	}
	for _, l := range limits {
		t.Run(string(l.Algorithm), func(t *testing.T) {
			s, _ := newMemStore()
			var allowed atomic.Int64
			var wg sync.WaitGroup
			start := make(chan struct{})
			for g := 0; g < 200; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					for i := 0; i < 3; i++ {
						r, err := s.Take(context.Background(), "one", 1, specs(l)...)
						if err != nil {
							t.Error(err)
							return
						}
						if r.Allowed {
							allowed.Add(1)
						}
					}
				}()
			}
			close(start)
			wg.Wait()
			if got := allowed.Load(); got != 50 {
				t.Fatalf("200 goroutines × 3 takes admitted %d, want exactly 50", got)
			}
		})
	}
	t.Run("two limits", func(t *testing.T) {
		// 30 pass the first limit, 50 the second: exactly 30 pass both,
		// and the second is charged only for those.
		s, _ := newMemStore()
		a := store.Limit{Algorithm: store.FixedWindow, Rate: 30, Period: time.Hour}
		b := store.Limit{Algorithm: store.SlidingLog, Rate: 50, Period: time.Hour}
		var allowed atomic.Int64
		var wg sync.WaitGroup
		for g := 0; g < 200; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if r, err := s.Take(context.Background(), "one", 1, specs(a, b)...); err == nil && r.Allowed {
					allowed.Add(1)
				}
			}()
		}
		wg.Wait()
		if got := allowed.Load(); got != 30 {
			t.Fatalf("admitted %d, want 30", got)
		}
		if r := memTake(t, s, "one", 0, b); r.Remaining != 20 {
			t.Fatalf("second limit remaining %d, want 20", r.Remaining)
		}
	})
}

func TestMemoryBoundUnderFlood(t *testing.T) {
	const maxKeys = 1000
	s, clock := newMemStore(memorystore.WithMaxKeys(maxKeys))
	limits := []store.Limit{
		{Algorithm: store.GCRA, Rate: 10, Period: time.Minute},
		{Algorithm: store.SlidingLog, Rate: 5, Period: time.Minute},
	}
	for i := 0; i < 50_000; i++ {
		memTake(t, s, fmt.Sprintf("flood-%d", i), 1, limits...)
		if i%500 == 0 {
			clock.Advance(time.Millisecond)
			if n := memorystore.Len(s); n > maxKeys {
				t.Fatalf("after %d keys the store holds %d states, bound %d", i+1, n, maxKeys)
			}
		}
	}
	if n := memorystore.Len(s); n > maxKeys || n < maxKeys/2 {
		t.Fatalf("store holds %d states, want at most %d and not far below", n, maxKeys)
	}
	// The default bound applies with WithMaxKeys(0).
	s0 := memorystore.New(memorystore.WithMaxKeys(0))
	memTake(t, s0, "k", 1, limits[0])
	if memorystore.Len(s0) != 1 {
		t.Fatalf("WithMaxKeys(0) store holds %d states", memorystore.Len(s0))
	}
}

func TestMemoryReclaimsExpired(t *testing.T) {
	s, clock := newMemStore() // default bound: nothing is evicted here
	l := store.Limit{Algorithm: store.TokenBucket, Rate: 1, Period: time.Second}
	for i := 0; i < 2000; i++ {
		memTake(t, s, fmt.Sprintf("old-%d", i), 1, l)
	}
	if memorystore.Len(s) != 2000 {
		t.Fatalf("Len = %d, want 2000", memorystore.Len(s))
	}
	clock.Advance(time.Second) // every token refilled: all 2000 states expired
	for i := 0; i < 2000; i++ {
		memTake(t, s, fmt.Sprintf("new-%d", i), 1, l)
	}
	// Each insertion deleted the expired entries among those it sampled.
	if n := memorystore.Len(s); n > 2100 {
		t.Fatalf("Len = %d after 2000 inserts over 2000 expired states: expired state is not reclaimed", n)
	}
	// An expired state behaves as absent.
	if r := memTake(t, s, "old-1", 1, l); !r.Allowed || r.Remaining != 0 {
		t.Fatalf("expired key: %+v", r)
	}
}

// TestMemoryExpiredEvictedFirst fills one shard with expired states and one
// live, nearly fresh state, the cheapest live one to forget: an insertion
// into the full shard reclaims expired states and keeps the live one.
func TestMemoryExpiredEvictedFirst(t *testing.T) {
	s, clock := newMemStore(memorystore.WithMaxKeys(64)) // one shard of 64
	live := store.Limit{Algorithm: store.GCRA, Rate: 100, Period: time.Hour}
	short := store.Limit{Algorithm: store.GCRA, Rate: 1, Period: time.Millisecond}
	memTake(t, s, "live", 1, live)
	for i := 0; i < 63; i++ {
		memTake(t, s, fmt.Sprintf("short-%d", i), 1, short)
	}
	if memorystore.Len(s) != 64 {
		t.Fatalf("Len = %d, want 64", memorystore.Len(s))
	}
	clock.Advance(time.Second)
	memTake(t, s, "newcomer", 1, store.Limit{Algorithm: store.FixedWindow, Rate: 1, Period: time.Hour})
	if n := memorystore.Len(s); n > 64-7+1 {
		t.Fatalf("Len = %d: the insertion did not reclaim the expired states it sampled", n)
	}
	if r := memTake(t, s, "live", 0, live); r.Remaining != 99 {
		t.Fatalf("live state lost: remaining %d, want 99", r.Remaining)
	}
}

// TestMemoryEvictionKeepsExhaustedState floods a full store with fresh
// keys: the client that exhausted its allowance (or is penalty-locked)
// must stay limited, whatever the algorithm, even where its state expires
// sooner than the flood's.
func TestMemoryEvictionKeepsExhaustedState(t *testing.T) {
	for _, l := range []store.Limit{
		{Algorithm: store.GCRA, Rate: 10, Period: time.Minute},
		{Algorithm: store.LeakyBucket, Rate: 10, Period: time.Minute},
		{Algorithm: store.TokenBucket, Rate: 10, Period: time.Minute},
		{Algorithm: store.FixedWindow, Rate: 10, Period: time.Minute},
		{Algorithm: store.SlidingWindow, Rate: 10, Period: time.Minute},
		{Algorithm: store.SlidingLog, Rate: 10, Period: time.Minute},
		{Algorithm: store.GCRA, Rate: 10, Period: time.Second, Penalty: time.Hour},
	} {
		t.Run(l.String(), func(t *testing.T) {
			s, clock := newMemStore(memorystore.WithMaxKeys(64))
			for memTake(t, s, "attacker", 1, l).Allowed {
			}
			if l.Penalty > 0 {
				memTake(t, s, "attacker", 1, l)
			}
			for i := 0; i < 5000; i++ {
				if i%100 == 0 {
					// The flood's states outlive the attacker's SlidingLog
					// entries, so "expires soonest" alone would pick it.
					clock.Advance(time.Millisecond)
				}
				memTake(t, s, fmt.Sprintf("fresh-%d", i), 1, l)
				if memorystore.Len(s) > 64 {
					t.Fatalf("Len = %d > 64", memorystore.Len(s))
				}
			}
			if r := memTake(t, s, "attacker", 1, l); r.Allowed {
				t.Fatalf("the flood evicted the attacker's exhausted state: %+v", r)
			}
		})
	}
}

func TestMemoryLongKeys(t *testing.T) {
	s, _ := newMemStore()
	l := store.Limit{Algorithm: store.FixedWindow, Rate: 1, Period: time.Minute}
	a := strings.Repeat("a", 64<<10)
	b := a[:len(a)-1] + "b"
	if !memTake(t, s, a, 1, l).Allowed || memTake(t, s, a, 1, l).Allowed {
		t.Fatal("a long key does not keep its state")
	}
	if !memTake(t, s, b, 1, l).Allowed {
		t.Fatal("two long keys differing in the last byte share state")
	}
	// A short key spelling a long key's digest is another key.
	sum := sha256.Sum256([]byte(a))
	if !memTake(t, s, string(sum[:]), 1, l).Allowed {
		t.Fatal("a short key equal to a long key's digest shares its state")
	}
	// Keys up to 256 bytes are kept as they are; 257 bytes is hashed.
	k256 := strings.Repeat("k", 256)
	if !memTake(t, s, k256, 1, l).Allowed || !memTake(t, s, k256+"k", 1, l).Allowed {
		t.Fatal("keys of 256 and 257 bytes share state")
	}
}

func TestMemoryTakeAllocations(t *testing.T) {
	ctx := context.Background()
	for _, l := range []store.Limit{
		{Algorithm: store.GCRA, Rate: 1000, Period: time.Second},
		{Algorithm: store.LeakyBucket, Rate: 1000, Period: time.Second},
		{Algorithm: store.TokenBucket, Rate: 1000, Period: time.Second},
		{Algorithm: store.FixedWindow, Rate: 1000, Period: time.Second},
		{Algorithm: store.SlidingWindow, Rate: 1000, Period: time.Second},
		{Algorithm: store.SlidingLog, Rate: 100, Period: 100 * time.Millisecond},
		{Algorithm: store.GCRA, Rate: 1, Period: time.Hour, Penalty: time.Second},
	} {
		s, clock := newMemStore()
		key := "client-1"
		memTake(t, s, key, 1, l)
		for i := 0; i < 300; i++ { // a steady state: the log buffer has grown
			clock.Advance(time.Millisecond)
			memTake(t, s, key, 1, l)
		}
		sp := specs(l)
		allocs := testing.AllocsPerRun(1000, func() {
			clock.Advance(time.Millisecond)
			if _, err := s.Take(ctx, key, 1, sp...); err != nil {
				t.Fatal(err)
			}
		})
		if allocs != 0 {
			t.Errorf("%v: %v allocations per Take, want 0", l, allocs)
		}
		allocs = testing.AllocsPerRun(100, func() { _, _ = s.Take(ctx, key, 0, sp...) })
		if allocs != 0 {
			t.Errorf("%v: %v allocations per peek, want 0", l, allocs)
		}
	}
	// A peek at an unknown key stores and allocates nothing.
	s, _ := newMemStore()
	l := store.PerSecond(5)
	sp := specs(l)
	if allocs := testing.AllocsPerRun(100, func() { _, _ = s.Take(ctx, "nobody", 0, sp...) }); allocs != 0 || memorystore.Len(s) != 0 {
		t.Errorf("peek at an unknown key: %v allocations, %d states", allocs, memorystore.Len(s))
	}
	// Take keeps no reference to its key, so a key the caller builds (a
	// Limiter's prefix and its client's key) stays on the caller's stack.
	prefix, client := "4:test:", "client-1"
	memTake(t, s, prefix+client, 1, l)
	if allocs := testing.AllocsPerRun(100, func() { _, _ = s.Take(ctx, prefix+client, 1, sp...) }); allocs != 0 {
		t.Errorf("a key built by the caller: %v allocations per Take, want 0", allocs)
	}
	// Several limits allocate only the PerLimit slice.
	l2 := store.Limit{Algorithm: store.FixedWindow, Rate: 1 << 40, Period: time.Hour}
	memTake(t, s, "k", 1, l, l2)
	sp2 := specs(l, l2)
	if allocs := testing.AllocsPerRun(100, func() { _, _ = s.Take(ctx, "k", 0, sp2...) }); allocs > 1 {
		t.Errorf("two limits: %v allocations, want at most 1", allocs)
	}
}

// TestMemoryKeyBufferReused: Take keeps no reference to its key, so a
// caller may pass a key held in a buffer it then reuses (core's Limiter
// builds the memory store's key in a stack array): the states stay those
// of the keys as they were at each call.
func TestMemoryKeyBufferReused(t *testing.T) {
	s, _ := newMemStore()
	l := store.Limit{Algorithm: store.FixedWindow, Rate: 10, Period: time.Hour}
	sp := specs(l)
	buf := make([]byte, 0, 64)
	take := func(key string) store.Result {
		b := append(buf[:0], key...)
		res, err := s.Take(context.Background(), unsafe.String(unsafe.SliceData(b), len(b)), 1, sp...)
		if err != nil {
			t.Fatal(err)
		}
		clear(b) // the buffer's next use, as a stack array's next call
		return res
	}
	for i := 0; i < 3; i++ {
		take("client-a")
	}
	take("client-b")
	for key, want := range map[string]int64{"client-a": 7, "client-b": 9, "\x00\x00\x00\x00\x00\x00\x00\x00": 10} {
		if res := memTake(t, s, key, 0, l); res.Remaining != want {
			t.Errorf("%q: remaining %d after the buffer's reuse, want %d", key, res.Remaining, want)
		}
	}
}

// TestMemoryClockBackwards pins what each algorithm does when the clock
// reads earlier than at a previous call (ALGORITHMS.md, "A clock that goes
// backwards"). Times are from memEpoch, which is aligned to the hour.
func TestMemoryClockBackwards(t *testing.T) {
	t.Run("GCRA waits longer, a denied peek sets no lock", func(t *testing.T) {
		s, clock := newMemStore()
		l := store.Limit{Algorithm: store.GCRA, Rate: 1, Period: time.Second, Burst: 1, Penalty: 10 * time.Second}
		checkResult(t, "take at 0", memTake(t, s, "k", 1, l), memWant{true, 1, 0, 0, time.Second, 0}) // tat 1s
		clock.Advance(-2 * time.Second)
		// used = tat - now = 3s > dvt = 1s: even a peek is denied, retry
		// max(3s - 1s, L) = L, reset max(3s, L) = L.
		checkResult(t, "peek at -2s", memTake(t, s, "k", 0, l), memWant{false, 1, 0, 10 * time.Second, 10 * time.Second, 0})
		clock.Advance(3 * time.Second)
		// Had the peek locked the key until 8s, this would be denied.
		checkResult(t, "take at 1s", memTake(t, s, "k", 1, l), memWant{true, 1, 0, 0, time.Second, 0})
	})
	t.Run("FixedWindow counts an earlier window afresh", func(t *testing.T) {
		s, clock := newMemStore()
		l := store.Limit{Algorithm: store.FixedWindow, Rate: 1, Period: time.Second}
		clock.Advance(1200 * time.Millisecond)
		checkResult(t, "take at 1.2s", memTake(t, s, "k", 1, l), memWant{true, 1, 0, 0, 800 * time.Millisecond, 0})
		clock.Advance(-400 * time.Millisecond)
		// State (w=1, c=1) is not window 0's: c = 0, and the write
		// replaces it with (w=0, c=1).
		checkResult(t, "take at 0.8s", memTake(t, s, "k", 1, l), memWant{true, 1, 0, 0, 200 * time.Millisecond, 0})
		clock.Advance(400 * time.Millisecond)
		checkResult(t, "take at 1.2s again", memTake(t, s, "k", 1, l), memWant{true, 1, 0, 0, 800 * time.Millisecond, 0})
	})
	t.Run("SlidingLog counts the entries stamped later", func(t *testing.T) {
		s, clock := newMemStore()
		l := store.Limit{Algorithm: store.SlidingLog, Rate: 1, Period: time.Second}
		checkResult(t, "take at 0", memTake(t, s, "k", 1, l), memWant{true, 1, 0, 0, time.Second, 0})
		clock.Advance(-500 * time.Millisecond)
		// The entry at 0 is in (now - P, ...]: denied until it leaves,
		// retry = 0 + P - now = 1.5s.
		checkResult(t, "take at -0.5s", memTake(t, s, "k", 1, l), memWant{false, 1, 0, 1500 * time.Millisecond, 1500 * time.Millisecond, 0})
	})
	t.Run("TokenBucket refills nothing before its last write", func(t *testing.T) {
		s, clock := newMemStore()
		l := store.Limit{Algorithm: store.TokenBucket, Rate: 1, Period: time.Second, Burst: 1}
		checkResult(t, "take at 0", memTake(t, s, "k", 1, l), memWant{true, 1, 0, 0, time.Second, 0}) // tok 0, ts 0
		clock.Advance(-time.Second)
		// elapsed = max(0, now - ts) = 0: no refill, retry ceil(P/R) from now.
		checkResult(t, "take at -1s", memTake(t, s, "k", 1, l), memWant{false, 1, 0, time.Second, time.Second, 0})
		clock.Advance(time.Second)
		checkResult(t, "take at 0 again", memTake(t, s, "k", 1, l), memWant{false, 1, 0, time.Second, time.Second, 0})
		clock.Advance(time.Second)
		checkResult(t, "take at 1s", memTake(t, s, "k", 1, l), memWant{true, 1, 0, 0, time.Second, 0})
	})
}
