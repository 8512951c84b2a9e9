package core

// algorithmFacts is everything the package knows of one algorithm beyond
// its arithmetic (memory_algo.go and lua/take.lua): one entry per
// algorithm, so that a fact is written once.
type algorithmFacts struct {
	code  string // one letter: Spec.ID and the Lua scripts' code
	burst bool   // it has a Burst (defaulting to Rate); the windows have none
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
		code: "g", burst: true,
		capacity: func(s *Spec) int64 { return s.Burst },
		horizon:  func(s *Spec) int64 { return s.Burst * s.Interval },
		bounds:   tatBounds,
	},
	LeakyBucket: {
		code: "k", burst: true,
		capacity: func(s *Spec) int64 { return s.Burst + 1 }, // the job in service and a queue of Burst
		horizon:  func(s *Spec) int64 { return (s.Burst + 1) * s.Interval },
		bounds:   tatBounds,
	},
	TokenBucket: {
		code: "t", burst: true,
		capacity: func(s *Spec) int64 { return s.Burst },
		horizon:  func(s *Spec) int64 { return (s.Burst*s.Period + s.Rate - 1) / s.Rate },
		bounds: func(s *Spec) string {
			// Tokens are kept scaled by P: capacity B·P and refill R·elapsed.
			if s.Burst > maxExact/s.Period || s.Rate > maxExact/s.Period {
				return "burst × period and rate × period must be below 2^53 µs"
			}
			return ""
		},
	},
	FixedWindow: {
		code:     "f",
		capacity: func(s *Spec) int64 { return s.Rate },
		horizon:  func(s *Spec) int64 { return s.Period },
		bounds: func(s *Spec) string {
			if s.Rate >= maxExact {
				return "rate must be below 2^53"
			}
			return ""
		},
	},
	SlidingWindow: {
		code:     "w",
		capacity: func(s *Spec) int64 { return s.Rate },
		horizon:  func(s *Spec) int64 { return 2 * s.Period },
		bounds: func(s *Spec) string {
			// The weighted estimate compares sums of counts × P (up to 3·R·P).
			if s.Rate > maxExact/(4*s.Period) {
				return "rate × period must be below 2^51 µs"
			}
			return ""
		},
	},
	SlidingLog: {
		code:     "l",
		capacity: func(s *Spec) int64 { return s.Rate },
		horizon:  func(s *Spec) int64 { return s.Period },
		bounds: func(s *Spec) string {
			if s.Rate > MaxSlidingLogRate {
				return "sliding_log keeps one entry per event: rate must be at most 100000"
			}
			return ""
		},
	},
}

// tatBounds are the bounds of GCRA and LeakyBucket, which keep a
// theoretical arrival time.
func tatBounds(s *Spec) string {
	if s.Rate > s.Period {
		return "more than one event per microsecond cannot be timed; lower the rate or lengthen the period"
	}
	// The tolerance (Burst+1)·T and every TAT offset must stay exact.
	if s.Burst >= maxExact/s.Interval-1 {
		return "burst × period/rate is too large"
	}
	return ""
}

// Capacity returns what s lets through at once from a full state, the
// figure stores report as Result.Limit and the IETF quota: Burst for GCRA
// and TokenBucket, Burst+1 for LeakyBucket (the request in service and a
// queue of Burst), Rate for the window algorithms.
func (s Spec) Capacity() int64 { return facts[s.Algorithm].capacity(&s) }
