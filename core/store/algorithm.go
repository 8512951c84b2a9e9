package store

import "time"

// algorithmFacts is everything the package knows of one algorithm beyond
// its arithmetic (core/memorystore/algo.go and lua/take.lua): one entry per
// algorithm, so that a fact is written once.
type algorithmFacts struct {
	burst bool // it has a Burst (defaulting to Rate); the windows have none
	// capacity is what passes at once from a full state: the figure
	// stores report as Result.Limit.
	capacity func(s *Spec) int64
	// horizon is how long after its last charge a state can still refuse
	// a request, penalty aside: the time to refill completely, in µs.
	horizon func(s *Spec) int64
	// bounds reports sizes whose arithmetic would not stay exact in a Lua
	// number; "" when s is fine. s has its defaults and Interval.
	bounds func(s *Spec) string
}

var facts = map[Algorithm]*algorithmFacts{
	GCRA: {
		burst:    true,
		capacity: func(s *Spec) int64 { return s.burst },
		horizon:  func(s *Spec) int64 { return s.burst * s.interval },
		bounds:   tatBounds,
	},
	LeakyBucket: {
		burst:    true,
		capacity: func(s *Spec) int64 { return s.burst + 1 }, // the job in service and a queue of Burst
		horizon:  func(s *Spec) int64 { return (s.burst + 1) * s.interval },
		bounds:   tatBounds,
	},
	TokenBucket: {
		burst:    true,
		capacity: func(s *Spec) int64 { return s.burst },
		horizon:  func(s *Spec) int64 { return (s.burst*s.period + s.rate - 1) / s.rate },
		bounds: func(s *Spec) string {
			// Tokens are kept scaled by P: capacity B·P and refill R·elapsed.
			if s.burst > maxExact/s.period || s.rate > maxExact/s.period {
				return "burst × period and rate × period must be below 2^53 µs"
			}
			return ""
		},
	},
	FixedWindow: {
		capacity: func(s *Spec) int64 { return s.rate },
		horizon:  func(s *Spec) int64 { return s.period },
		bounds: func(s *Spec) string {
			if s.rate >= maxExact {
				return "rate must be below 2^53"
			}
			return ""
		},
	},
	SlidingWindow: {
		capacity: func(s *Spec) int64 { return s.rate },
		horizon:  func(s *Spec) int64 { return 2 * s.period },
		bounds: func(s *Spec) string {
			// The weighted estimate compares sums of counts × P (up to 3·R·P).
			if s.rate > maxExact/(4*s.period) {
				return "rate × period must be below 2^51 µs"
			}
			return ""
		},
	},
	SlidingLog: {
		capacity: func(s *Spec) int64 { return s.rate },
		horizon:  func(s *Spec) int64 { return s.period },
		bounds: func(s *Spec) string {
			if s.rate > maxSlidingLogRate {
				return "sliding_log keeps one entry per admitted request: rate must be at most 100000"
			}
			return ""
		},
	},
	InFlight: {
		capacity: func(s *Spec) int64 { return s.rate },
		horizon:  func(s *Spec) int64 { return s.period },
		bounds: func(s *Spec) string {
			if s.rate > maxInFlightSlots {
				return "in_flight keeps one entry per slot taken: rate must be at most 100000"
			}
			return ""
		},
	},
}

// tatBounds are the bounds of GCRA and LeakyBucket, which keep a
// theoretical arrival time.
func tatBounds(s *Spec) string {
	if s.rate > s.period {
		return "more than one event per microsecond cannot be timed; lower the rate or lengthen the period"
	}
	// The tolerance (Burst+1)·T and every TAT offset must stay exact.
	if s.burst >= maxExact/s.interval-1 {
		return "burst × period/rate is too large"
	}
	return ""
}

// Capacity returns what s lets through at once from a full state, the
// figure stores report as Result.Limit and the IETF quota: Burst for GCRA
// and TokenBucket, Burst+1 for LeakyBucket (the request in service and a
// queue of Burst), Rate for the window Algorithms and InFlight.
func (s Spec) Capacity() int64 { return facts[s.alg].capacity(&s) }

// Horizon returns how long after its last charge a state of s can still
// refuse a request, penalty aside: the time to refill completely, in µs
// (Burst·Period/Rate for GCRA, TokenBucket and LeakyBucket, Period for
// FixedWindow and SlidingLog, 2·Period for SlidingWindow, the hold for
// InFlight).
// A calendar window's is its longest: its Period plus a day.
func (s Spec) Horizon() int64 {
	if s.calendar != "" {
		return s.period + int64(calendarSlack/time.Microsecond)
	}
	return facts[s.alg].horizon(&s)
}
