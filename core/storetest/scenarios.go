package storetest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/store"
)

const (
	ms = time.Millisecond
	us = time.Microsecond
	// inf is core.InfDuration, short for the tables.
	inf = store.InfDuration
)

// step is one Take of a scenario and the Result ALGORITHMS.md prescribes.
type step struct {
	at   time.Duration // since the scenario's first step
	n    int64
	want store.Result
}

// scenario is a sequence of Takes on one fresh key, with figures computed by
// hand from ALGORITHMS.md.
type scenario struct {
	name   string
	limits []store.Limit
	// align, when positive, starts the first step offset past a multiple of
	// align since the Unix epoch (the window algorithms depend on it).
	align, offset time.Duration
	// margin is how late a step may run on the wall clock before some
	// expected figure could change; zero means the scenario needs an exact
	// clock. On a wall clock every step runs no earlier than scheduled
	// relative to the previous one, so lateness only ever accumulates and
	// only ever adds allowance: a figure at an exact threshold holds.
	margin time.Duration
	steps  []step
}

func allow(limit, remaining int64, reset time.Duration) store.Result {
	return store.Result{Allowed: true, Limit: limit, Remaining: remaining, ResetAfter: reset}
}

func allowDelay(limit, remaining int64, reset, delay time.Duration) store.Result {
	r := allow(limit, remaining, reset)
	r.Delay = delay
	return r
}

func deny(limit, remaining int64, retry, reset time.Duration) store.Result {
	return store.Result{Limit: limit, Remaining: remaining, RetryAfter: retry, ResetAfter: reset}
}

// multi is the Result of a Take over several limits: the binding limit's
// figures, with the given overall Delay and every limit's own Result.
func multi(binding int, delay time.Duration, per ...store.Result) store.Result {
	r := per[binding]
	r.Binding = binding
	r.Delay = delay
	r.PerLimit = per
	return r
}

// scenarios returns every hand-computed scenario, family by family. Notation
// in the comments follows ALGORITHMS.md; times are relative to the first step.
func scenarios() []scenario {
	return slices.Concat(
		redisCellScenarios(),
		gcraScenarios(),
		bucketScenarios(),
		windowScenarios(),
		slidingLogScenarios(),
		penaltyBucketScenarios(),
		penaltyWindowScenarios(),
		multiScenarios(),
		duplicateScenarios(),
		multiDelayScenarios(),
	)
}

// redisCellScenarios returns GCRA held to the figures of redis-cell's
// CL.THROTTLE.
func redisCellScenarios() []scenario {
	return []scenario{
		{
			// redis-cell: CL.THROTTLE k 15 30 60 → 0 16 15 -1 2.
			// T = 2s, dvt = 32s.
			name:   "GCRA/cl.throttle",
			limits: []store.Limit{{Algorithm: store.GCRA, Rate: 30, Period: time.Minute, Burst: 16}},
			margin: time.Second,
			steps: []step{
				{0, 1, allow(16, 15, 2*time.Second)},
				{0, 15, allow(16, 0, 32*time.Second)}, // newTat-now = 32s = dvt
				{0, 1, deny(16, 0, 2*time.Second, 32*time.Second)},
			},
		},
		{
			name:   "GCRA/cl.throttle-refill",
			limits: []store.Limit{{Algorithm: store.GCRA, Rate: 30, Period: time.Minute, Burst: 16}},
			steps: []step{
				{0, 1, allow(16, 15, 2*time.Second)},
				{0, 15, allow(16, 0, 32*time.Second)},
				{0, 1, deny(16, 0, 2*time.Second, 32*time.Second)},
				{time.Second, 1, deny(16, 0, time.Second, 31*time.Second)}, // tat 32s: 34-1-32
				{2 * time.Second, 1, allow(16, 0, 32*time.Second)},         // tat → 34s
				{2 * time.Second, 0, allow(16, 0, 32*time.Second)},
				{2 * time.Second, 17, deny(16, 0, inf, 32*time.Second)},
				{40 * time.Second, 0, allow(16, 16, 0)},
				{40 * time.Second, 16, allow(16, 0, 32*time.Second)},
			},
		},
	}
}

// gcraScenarios returns GCRA's own scenarios.
func gcraScenarios() []scenario {
	return []scenario{
		{
			// Limit{GCRA,1,2s,1}: T = dvt = 2s.
			name:   "GCRA/one-per-2s",
			limits: []store.Limit{{Algorithm: store.GCRA, Rate: 1, Period: 2 * time.Second, Burst: 1}},
			margin: time.Second,
			steps: []step{
				{0, 1, allow(1, 0, 2*time.Second)},
				{0, 1, deny(1, 0, 2*time.Second, 2*time.Second)},
			},
		},
		{
			// T = 200ms, dvt = 600ms.
			name:   "GCRA",
			limits: []store.Limit{{Algorithm: store.GCRA, Rate: 5, Period: time.Second, Burst: 3}},
			margin: 100 * ms,
			steps: []step{
				{0, 1, allow(3, 2, 200*ms)},               // tat 200
				{0, 2, allow(3, 0, 600*ms)},               // tat 600
				{0, 1, deny(3, 0, 200*ms, 600*ms)},        // newTat 800
				{100 * ms, 1, deny(3, 0, 100*ms, 500*ms)}, // 800-100-600; used 500
				{200 * ms, 1, allow(3, 0, 600*ms)},        // tat 800
				{200 * ms, 0, allow(3, 0, 600*ms)},        // a peek
				{200 * ms, 4, deny(3, 0, inf, 600*ms)},    // n > B
				{500 * ms, 0, allow(3, 1, 300*ms)},        // used 300: floor(300/200)
				{500 * ms, 2, deny(3, 1, 100*ms, 300*ms)}, // newTat 1200: 700-600
				{500 * ms, 1, allow(3, 0, 500*ms)},        // tat 1000
			},
		},
	}
}

// bucketScenarios returns LeakyBucket's (with its Delay) and TokenBucket's.
func bucketScenarios() []scenario {
	return []scenario{
		{
			// T = 200ms, limit = B+1 = 3, cap = 600ms.
			name:   "LeakyBucket",
			limits: []store.Limit{{Algorithm: store.LeakyBucket, Rate: 5, Period: time.Second, Burst: 2}},
			margin: 100 * ms,
			steps: []step{
				{0, 1, allowDelay(3, 2, 200*ms, 0)},
				{0, 1, allowDelay(3, 1, 400*ms, 200*ms)},
				{0, 1, allowDelay(3, 0, 600*ms, 400*ms)},
				{0, 1, deny(3, 0, 200*ms, 600*ms)},
				{0, 4, deny(3, 0, inf, 600*ms)},                 // n > B+1
				{0, 0, allow(3, 0, 600*ms)},                     // a peek reports delay 0
				{300 * ms, 1, allowDelay(3, 0, 500*ms, 300*ms)}, // tat 800: delay 800-200-300
				{300 * ms, 1, deny(3, 0, 100*ms, 500*ms)},
				{time.Second, 0, allow(3, 3, 0)},
				{time.Second, 3, allowDelay(3, 0, 600*ms, 400*ms)},
			},
		},
		{
			// cap = 3·P; R = 5 tokens/s: one token per 200ms.
			name:   "TokenBucket",
			limits: []store.Limit{{Algorithm: store.TokenBucket, Rate: 5, Period: time.Second, Burst: 3}},
			margin: 100 * ms,
			steps: []step{
				{0, 1, allow(3, 2, 200*ms)},
				{0, 2, allow(3, 0, 600*ms)},
				{0, 1, deny(3, 0, 200*ms, 600*ms)},
				{100 * ms, 1, deny(3, 0, 100*ms, 500*ms)}, // 0.5 token, not written
				{200 * ms, 1, allow(3, 0, 600*ms)},        // 1 token since the last write
				{200 * ms, 4, deny(3, 0, inf, 600*ms)},
				{700 * ms, 0, allow(3, 2, 100*ms)}, // 2.5 tokens
				{700 * ms, 3, deny(3, 2, 100*ms, 100*ms)},
				{time.Second, 0, allow(3, 3, 0)}, // refilled: elapsed 800ms ≥ 600ms
				{time.Second, 3, allow(3, 0, 600*ms)},
			},
		},
	}
}

// windowScenarios returns FixedWindow's and SlidingWindow's, on windows
// aligned to the Unix epoch.
func windowScenarios() []scenario {
	return []scenario{
		{
			// Windows of 600ms from the epoch; the first step 100ms into one.
			name:   "FixedWindow",
			limits: []store.Limit{{Algorithm: store.FixedWindow, Rate: 3, Period: 600 * ms}},
			align:  600 * ms, offset: 100 * ms,
			margin: 150 * ms,
			steps: []step{
				{0, 1, allow(3, 2, 500*ms)},
				{0, 2, allow(3, 0, 500*ms)},
				{0, 1, deny(3, 0, 500*ms, 500*ms)},
				{0, 4, deny(3, 0, inf, 500*ms)},
				{300 * ms, 0, allow(3, 0, 200*ms)},
				{600 * ms, 1, allow(3, 2, 500*ms)}, // next window
				{600 * ms, 0, allow(3, 2, 500*ms)},
				{1250 * ms, 0, allow(3, 3, 0)}, // two windows on: the old count is gone
			},
		},
		{
			// P = 1s, windows from the epoch; the first step at e = 200ms.
			name:   "SlidingWindow",
			limits: []store.Limit{{Algorithm: store.SlidingWindow, Rate: 4, Period: time.Second}},
			align:  time.Second, offset: 200 * ms,
			margin: 150 * ms,
			steps: []step{
				{0, 3, allow(4, 1, 1800*ms)}, // c = 3; reset 2P-e
				// R-c-n < 0: e2 = P - floor(2P/3) = 333334µs; retry (P-e)+e2.
				{0, 2, deny(4, 1, 1133334*us, 1800*ms)},
				{0, 1, allow(4, 0, 1800*ms)},
				{0, 1, deny(4, 0, 1050*ms, 1800*ms)}, // e2 = P - floor(3P/4) = 250ms
				{0, 5, deny(4, 0, inf, 1800*ms)},
				{500 * ms, 0, allow(4, 0, 1300*ms)},
				// Next window, e = 100ms: p = 4, c = 0; 4·0.9P + P > 4P.
				// e1 = P - floor(3P/4) = 250ms: retry 150ms; reset P-e.
				{900 * ms, 1, deny(4, 0, 150*ms, 900*ms)},
				{1100 * ms, 1, allow(4, 0, 1700*ms)},        // e = 300ms: 2.8P + P ≤ 4P
				{1100 * ms, 1, deny(4, 0, 200*ms, 1700*ms)}, // e1 = P - floor(2P/4)
				{1600 * ms, 2, allow(4, 0, 1200*ms)},        // e = 800ms: 0.8P + 3P ≤ 4P
				{2300 * ms, 0, allow(4, 2, 500*ms)},         // e = 500ms: p = 3: floor(2.5)
				{2850 * ms, 0, allow(4, 4, 0)},              // two windows on
			},
		},
	}
}

// slidingLogScenarios returns SlidingLog's.
func slidingLogScenarios() []scenario {
	return []scenario{
		{
			name:   "SlidingLog",
			limits: []store.Limit{{Algorithm: store.SlidingLog, Rate: 3, Period: time.Second}},
			margin: 100 * ms,
			steps: []step{
				{0, 1, allow(3, 2, time.Second)},
				{200 * ms, 1, allow(3, 1, time.Second)},
				{400 * ms, 2, deny(3, 1, 600*ms, 800*ms)}, // ts[0]+P-now
				{400 * ms, 1, allow(3, 0, time.Second)},
				{400 * ms, 4, deny(3, 0, inf, time.Second)},
				{600 * ms, 1, deny(3, 0, 400*ms, 800*ms)},
				{1100 * ms, 0, allow(3, 1, 300*ms)}, // the entry at 0 has left
				{1100 * ms, 2, deny(3, 1, 100*ms, 300*ms)},
				{1100 * ms, 1, allow(3, 0, time.Second)},
				{2500 * ms, 0, allow(3, 3, 0)},
			},
		},
	}
}

// penaltyBucketScenarios returns the penalty lock on GCRA, LeakyBucket and
// TokenBucket.
func penaltyBucketScenarios() []scenario {
	return []scenario{
		{
			// T = dvt = 500ms, L = 800ms.
			name:   "Penalty/GCRA",
			limits: []store.Limit{{Algorithm: store.GCRA, Rate: 2, Period: time.Second, Burst: 1, Penalty: 800 * ms}},
			margin: 150 * ms,
			steps: []step{
				{0, 1, allow(1, 0, 500*ms)},
				{0, 1, deny(1, 0, 800*ms, 800*ms)}, // retry max(500ms, L); lock until 800
				// Locked: GCRA alone would admit this; nothing is charged.
				{600 * ms, 1, deny(1, 0, 200*ms, 200*ms)},
				// The lock was neither extended nor did the locked call charge.
				{800 * ms, 1, allow(1, 0, 500*ms)},
				{800 * ms, 0, allow(1, 0, 500*ms)},        // peeks never lock
				{800 * ms, 1, deny(1, 0, 800*ms, 800*ms)}, // lock until 1600
				{800 * ms, 3, deny(1, 0, 800*ms, 800*ms)}, // the lock decides first
				{800 * ms, 0, deny(1, 0, 800*ms, 800*ms)}, // a peek is locked out too
				{1300 * ms, 1, deny(1, 0, 300*ms, 300*ms)},
				{1600 * ms, 1, allow(1, 0, 500*ms)},
			},
		},
		{
			// T = 100ms: the margin stays below it.
			name:   "Penalty/LeakyBucket",
			limits: []store.Limit{{Algorithm: store.LeakyBucket, Rate: 10, Period: time.Second, Burst: 1, Penalty: 250 * ms}},
			margin: 75 * ms,
			steps: []step{
				{0, 2, allowDelay(2, 0, 200*ms, 100*ms)},
				{0, 1, deny(2, 0, 250*ms, 250*ms)},       // retry max(100ms, L), reset max(200ms, L)
				{50 * ms, 1, deny(2, 0, 200*ms, 200*ms)}, // reset max(200ms, peek's 150ms)
				{250 * ms, 1, allowDelay(2, 1, 100*ms, 0)},
			},
		},
		{
			// cap = P; one token per second.
			name:   "Penalty/TokenBucket",
			limits: []store.Limit{{Algorithm: store.TokenBucket, Rate: 1, Period: time.Second, Burst: 1, Penalty: 300 * ms}},
			margin: 150 * ms,
			steps: []step{
				{0, 1, allow(1, 0, time.Second)},
				{0, 1, deny(1, 0, time.Second, time.Second)},
				{100 * ms, 0, deny(1, 0, 200*ms, 900*ms)},  // reset max(200ms, peek's 900ms)
				{300 * ms, 1, deny(1, 0, 700*ms, 700*ms)},  // the bucket denies again: relock
				{time.Second, 1, allow(1, 0, time.Second)}, // full since the write at 0
			},
		},
	}
}

// penaltyWindowScenarios returns the penalty lock on FixedWindow,
// SlidingWindow and SlidingLog.
func penaltyWindowScenarios() []scenario {
	return []scenario{
		{
			name:   "Penalty/FixedWindow",
			limits: []store.Limit{{Algorithm: store.FixedWindow, Rate: 1, Period: time.Second, Penalty: 300 * ms}},
			align:  time.Second, offset: 100 * ms,
			margin: 150 * ms,
			steps: []step{
				{0, 1, allow(1, 0, 900*ms)},
				{0, 1, deny(1, 0, 900*ms, 900*ms)},
				{200 * ms, 0, deny(1, 0, 100*ms, 700*ms)}, // lock until 300ms
				{900 * ms, 1, allow(1, 0, time.Second)},   // next window
				{900 * ms, 2, deny(1, 0, inf, time.Second)},
				{time.Second, 0, deny(1, 0, 200*ms, 900*ms)},
			},
		},
		{
			name:   "Penalty/SlidingWindow",
			limits: []store.Limit{{Algorithm: store.SlidingWindow, Rate: 2, Period: time.Second, Penalty: 400 * ms}},
			align:  time.Second, offset: 500 * ms,
			margin: 150 * ms,
			steps: []step{
				{0, 2, allow(2, 0, 1500*ms)},
				{0, 1, deny(2, 0, time.Second, 1500*ms)}, // e2 = P - floor(P/2): 500ms + 500ms
				{100 * ms, 0, deny(2, 0, 300*ms, 1400*ms)},
				{time.Second, 1, allow(2, 0, 1500*ms)}, // e = 500ms: 2·0.5P + P ≤ 2P
			},
		},
		{
			name:   "Penalty/SlidingLog",
			limits: []store.Limit{{Algorithm: store.SlidingLog, Rate: 2, Period: time.Second, Penalty: 300 * ms}},
			margin: 150 * ms,
			steps: []step{
				{0, 3, deny(2, 2, inf, 300*ms)}, // INF stays INF; reset max(0, L)
				{100 * ms, 1, deny(2, 0, 200*ms, 200*ms)},
				{300 * ms, 1, allow(2, 1, time.Second)},
				{300 * ms, 2, deny(2, 1, time.Second, time.Second)},
				{400 * ms, 1, deny(2, 0, 200*ms, 900*ms)}, // reset max(200ms, peek's 900ms)
				{600 * ms, 1, allow(2, 0, time.Second)},
			},
		},
	}
}

// multiScenarios returns Takes over several limits: nothing is charged when
// one denies, and which limit binds.
func multiScenarios() []scenario {
	return []scenario{
		{
			// A: 5 per aligned second; B: T = 500ms, dvt = 1s.
			name: "Multi/FixedWindow+GCRA",
			limits: []store.Limit{
				{Algorithm: store.FixedWindow, Rate: 5, Period: time.Second},
				{Algorithm: store.GCRA, Rate: 2, Period: time.Second, Burst: 2},
			},
			align: time.Second, offset: 100 * ms,
			margin: 150 * ms,
			steps: []step{
				{0, 1, multi(1, 0, allow(5, 4, 900*ms), allow(2, 1, 500*ms))},
				{0, 1, multi(1, 0, allow(5, 3, 900*ms), allow(2, 0, time.Second))},
				// B denies: A is not charged and reports its peek.
				{0, 1, multi(1, 0, allow(5, 3, 900*ms), deny(2, 0, 500*ms, time.Second))},
				{0, 0, multi(1, 0, allow(5, 3, 900*ms), allow(2, 0, time.Second))},
				{500 * ms, 1, multi(1, 0, allow(5, 2, 400*ms), allow(2, 0, time.Second))},
				{time.Second, 1, multi(1, 0, allow(5, 4, 900*ms), allow(2, 0, time.Second))},
			},
		},
		{
			// A: 2 per trailing second; B: 3 tokens, one per second.
			name: "Multi/SlidingLog+TokenBucket",
			limits: []store.Limit{
				{Algorithm: store.SlidingLog, Rate: 2, Period: time.Second},
				{Algorithm: store.TokenBucket, Rate: 1, Period: time.Second, Burst: 3},
			},
			margin: 150 * ms,
			steps: []step{
				{0, 2, multi(0, 0, allow(2, 0, time.Second), allow(3, 1, 2*time.Second))},
				{0, 1, multi(0, 0, deny(2, 0, time.Second, time.Second), allow(3, 1, 2*time.Second))},
				// Both deny: the largest retry (INF) binds.
				{0, 3, multi(0, 0, deny(2, 0, inf, time.Second), deny(3, 1, 2*time.Second, 2*time.Second))},
				{500 * ms, 1, multi(0, 0, deny(2, 0, 500*ms, 500*ms), allow(3, 1, 1500*ms))},
				// Equal retries: the first limit binds.
				{500 * ms, 2, multi(0, 0, deny(2, 0, 500*ms, 500*ms), deny(3, 1, 500*ms, 1500*ms))},
				// Equal remaining: the first limit binds.
				{time.Second, 1, multi(0, 0, allow(2, 1, time.Second), allow(3, 1, 2*time.Second))},
				{time.Second, 0, multi(0, 0, allow(2, 1, time.Second), allow(3, 1, 2*time.Second))},
			},
		},
	}
}

// duplicateScenarios returns Takes that give the same limit twice.
func duplicateScenarios() []scenario {
	return []scenario{
		{
			// The same limit twice in one Take is one state, charged once:
			// A: 3 per aligned second, given first and last; B: 4 per
			// trailing second.
			name: "Multi/Duplicate",
			limits: []store.Limit{
				{Algorithm: store.FixedWindow, Rate: 3, Period: time.Second},
				{Algorithm: store.SlidingLog, Rate: 4, Period: time.Second},
				{Algorithm: store.FixedWindow, Rate: 3, Period: time.Second},
			},
			align: time.Second, offset: 100 * ms,
			margin: 150 * ms,
			steps: []step{
				{0, 1, multi(0, 0, allow(3, 2, 900*ms), allow(4, 3, time.Second), allow(3, 2, 900*ms))},
				{0, 2, multi(0, 0, allow(3, 0, 900*ms), allow(4, 1, time.Second), allow(3, 0, 900*ms))},
				// A denies (twice, equal retries: the first binds); B was
				// not charged and reports its peek.
				{0, 1, multi(0, 0, deny(3, 0, 900*ms, 900*ms), allow(4, 1, time.Second), deny(3, 0, 900*ms, 900*ms))},
				// Next window; B's three entries, stamped at 0, have left.
				{time.Second, 1, multi(0, 0, allow(3, 2, 900*ms), allow(4, 3, time.Second), allow(3, 2, 900*ms))},
			},
		},
		{
			// The same limit twice with a penalty: one state, one lock.
			// T = dvt = 500ms, L = 700ms.
			name: "Multi/DuplicatePenalty",
			limits: []store.Limit{
				{Algorithm: store.GCRA, Rate: 2, Period: time.Second, Burst: 1, Penalty: 700 * ms},
				{Algorithm: store.GCRA, Rate: 2, Period: time.Second, Burst: 1, Penalty: 700 * ms},
			},
			margin: 150 * ms,
			steps: []step{
				{0, 1, multi(0, 0, allow(1, 0, 500*ms), allow(1, 0, 500*ms))},
				{0, 1, multi(0, 0, deny(1, 0, 700*ms, 700*ms), deny(1, 0, 700*ms, 700*ms))},
				{500 * ms, 1, multi(0, 0, deny(1, 0, 200*ms, 200*ms), deny(1, 0, 200*ms, 200*ms))},
				{700 * ms, 1, multi(0, 0, allow(1, 0, 500*ms), allow(1, 0, 500*ms))},
			},
		},
	}
}

// multiDelayScenarios returns the overall Delay of a Take over several
// limits.
func multiDelayScenarios() []scenario {
	return []scenario{
		{
			// A: T = 200ms, dvt = 400ms; B: T = 200ms, limit 4, cap 800ms.
			name: "Multi/GCRA+LeakyBucket",
			limits: []store.Limit{
				{Algorithm: store.GCRA, Rate: 5, Period: time.Second, Burst: 2},
				{Algorithm: store.LeakyBucket, Rate: 5, Period: time.Second, Burst: 3},
			},
			margin: 100 * ms,
			steps: []step{
				{0, 1, multi(0, 0, allow(2, 1, 200*ms), allowDelay(4, 3, 200*ms, 0))},
				// Delay is the largest of all, though A binds.
				{0, 1, multi(0, 200*ms, allow(2, 0, 400*ms), allowDelay(4, 2, 400*ms, 200*ms))},
				// Denied: no delay; B reports its peek (delay 0).
				{0, 1, multi(0, 0, deny(2, 0, 200*ms, 400*ms), allow(4, 2, 400*ms))},
			},
		},
	}
}

// wallScale stretches every duration of a time-driven case on a wall clock,
// so that its figures leave 100–300 ms of room for a loaded machine: a
// container over its CPU quota stalls for up to the 100 ms CFS period.
// The figures scale with it: every one is linear in the periods, up to
// rounding to the microsecond, far inside the tolerance.
const wallScale = 2

// scaled returns sc with every duration multiplied by k.
func (sc scenario) scaled(k time.Duration) scenario {
	out := sc
	out.limits = scaleLimits(sc.limits, k)
	out.align, out.offset, out.margin = sc.align*k, sc.offset*k, sc.margin*k
	out.steps = make([]step, len(sc.steps))
	for i, st := range sc.steps {
		out.steps[i] = step{at: st.at * k, n: st.n, want: scaleResult(st.want, k)}
	}
	return out
}

func scaleLimits(limits []store.Limit, k time.Duration) []store.Limit {
	out := make([]store.Limit, len(limits))
	for i, l := range limits {
		l.Period *= k
		l.Penalty *= k
		out[i] = l
	}
	return out
}

func scaleResult(r store.Result, k time.Duration) store.Result {
	scale := func(d time.Duration) time.Duration {
		if d == inf {
			return d
		}
		return d * k
	}
	r.RetryAfter, r.ResetAfter, r.Delay = scale(r.RetryAfter), scale(r.ResetAfter), scale(r.Delay)
	if r.PerLimit != nil {
		per := make([]store.Result, len(r.PerLimit))
		for i, p := range r.PerLimit {
			per[i] = scaleResult(p, k)
		}
		r.PerLimit = per
	}
	return r
}

// testScenarios plays every scenario; with flush, the store's scripts are
// flushed before every Take (on a wall clock only the opening burst of each
// scenario is played, to keep the run short).
//
// On a wall clock the scenarios, which mostly sleep, run at the same time:
// each subtest is started from its own goroutine (t.Run allows that), so
// that -parallel, which defaults to the number of CPUs, does not queue them.
func (s *suite) testScenarios(t *testing.T, flush bool) {
	var wg sync.WaitGroup
	for _, sc := range scenarios() {
		sc := sc
		run := func() {
			t.Run(sc.name, func(t *testing.T) {
				if !s.exact {
					if sc.margin == 0 {
						t.Skip("needs a controlled clock (Harness.Now and Advance)")
					}
					sc = sc.scaled(wallScale)
				}
				steps := sc.steps
				if !s.exact {
					if flush {
						i := 0
						for i < len(steps) && steps[i].at == 0 {
							i++
						}
						steps = steps[:i]
					}
				}
				s.play(t, sc, steps, flush)
			})
		}
		if s.exact {
			run()
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			run()
		}()
	}
	wg.Wait()
}

// play runs steps of sc on a fresh key, alternating between two store
// instances. On a wall clock, a run that fell behind schedule by the
// scenario's margin proves nothing past that step; it is retried on a new
// key (see retry).
func (s *suite) play(t *testing.T, sc scenario, steps []step, flush bool) {
	t.Helper()
	retry(t, func() ([]string, string) { return s.playOnce(t, sc, steps, flush) })
}

// How a wall-clock case that ran too late to judge waits out the load:
// up to lateAttempts attempts, the a-th after a pause of (a-1)·latePause
// (about 7 s in all), so that a burst of load on the machine can pass.
const (
	lateAttempts = 8
	latePause    = 250 * time.Millisecond
)

// retry runs attempt until it runs on time, and reports its failures. An
// attempt reports the failures of the steps it could judge and, when a
// step ran too late for its figures to hold, why it stopped there. Such an
// attempt, when nothing it judged failed, is tried again (it is expected
// to use a new key) after a pause, up to lateAttempts times. If every
// attempt ran late, the rest of the case cannot be judged on this machine
// now: that is logged, not failed, since a late step proves nothing about
// the store, and every step that ran on time was judged.
func retry(t *testing.T, attempt func() (fails []string, late string)) {
	t.Helper()
	for a := 1; ; a++ {
		fails, late := attempt()
		if late == "" || len(fails) > 0 {
			for _, f := range fails {
				t.Error(f)
			}
			return
		}
		if a == lateAttempts {
			t.Logf("not judged past the steps that ran on time: all %d attempts ran too late (last: %s); the machine stayed overloaded", a, late)
			return
		}
		pause := time.Duration(a) * latePause
		t.Logf("attempt %d: %s; retrying on a new key in %v", a, late, pause)
		time.Sleep(pause)
	}
}

// lateBy describes a step that ran too late for its figures to hold.
func lateBy(i int, drift, margin, call time.Duration) string {
	return fmt.Sprintf("step %d ran %v behind schedule (margin %v; its Take took %v)", i, drift.Round(us), margin, call.Round(us))
}

// waitStep waits for a step scheduled at at, the previous one having been
// scheduled at prevAt and having ended at prevEnd: on a controlled clock it
// advances the clock by at-prevAt; on a wall clock it sleeps until that
// long after the previous step ended, so that lateness only accumulates.
func (s *suite) waitStep(tb testing.TB, prevAt, at time.Duration, prevEnd time.Time) {
	if s.exact {
		s.advance(tb, at-prevAt)
		return
	}
	time.Sleep(time.Until(prevEnd.Add(at - prevAt)))
}

// playOnce returns the failed steps and, when the run fell behind by the
// margin before a failure showed, a description of the lateness.
func (s *suite) playOnce(t *testing.T, sc scenario, steps []step, flush bool) (fails []string, late string) {
	key := newKey(t)
	stores := s.stores(t)
	warmUp(t, sc.limits, stores[:]...)
	ref := s.align(t, sc.align, sc.offset)
	var prevAt time.Duration
	var prevEnd time.Time
	var drift time.Duration // the most any step so far ran behind schedule
	for i, st := range steps {
		if i > 0 {
			s.waitStep(t, prevAt, st.at, prevEnd)
			if flush {
				s.h.FlushScripts(t)
			}
		}
		if s.exact {
			fails = append(fails, s.checkPeek(t, stores[(i+1)%2], key, i, st, sc.limits)...)
		}
		start := time.Now()
		got, err := take(t, stores[i%2], key, st.n, sc.limits...)
		end := time.Now()
		tol := time.Duration(0)
		if !s.exact {
			drift = max(drift, end.Sub(ref)-st.at)
			if drift >= sc.margin {
				return fails, lateBy(i, drift, sc.margin, end.Sub(start))
			}
			tol = drift + ms
		}
		where := fmt.Sprintf("step %d (at %v, n=%d, limits %v)", i, st.at, st.n, sc.limits)
		if err != nil {
			return append(fails, fmt.Sprintf("%s: %v", where, err)), ""
		}
		if d := diffResult(got, st.want, tol); len(d) > 0 {
			fails = append(fails, fmt.Sprintf("%s: %v\n\tgot  %s\n\twant %s", where, d, fmtResult(got), fmtResult(st.want)))
		}
		prevAt, prevEnd = st.at, end
	}
	return fails, ""
}

// checkPeek peeks at step st before it is taken, through the other store
// instance: the Result must be the one the
// Take is about to return (the Take that follows shows it charged nothing).
func (s *suite) checkPeek(tb testing.TB, st store.Store, key string, i int, stp step, limits []store.Limit) []string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got, err := st.Peek(ctx, key, stp.n, specs(limits)...)
	where := fmt.Sprintf("peek before step %d (at %v, n=%d, limits %v)", i, stp.at, stp.n, limits)
	if err != nil {
		return []string{fmt.Sprintf("%s: %v", where, err)}
	}
	if d := diffResult(got, stp.want, 0); len(d) > 0 {
		return []string{fmt.Sprintf("%s: %v\n\tgot  %s\n\twant %s", where, d, fmtResult(got), fmtResult(stp.want))}
	}
	return nil
}
