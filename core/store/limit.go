package store

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"
)

// Algorithm names a rate-limiting algorithm. The string values are stable:
// they appear in flags, configuration and (abbreviated) in storage keys.
type Algorithm string

// The Algorithms sluice implements. Each behaves identically in the memory
// store and in the Redis store (see ALGORITHMS.md for the exact arithmetic).
const (
	// GCRA is the generic cell rate algorithm with redis-cell's CL.THROTTLE
	// semantics: Burst requests may pass at once, then one every Period/Rate.
	// Burst equals redis-cell's max_burst + 1. It is the zero value.
	GCRA Algorithm = "gcra"
	// TokenBucket holds Burst tokens, refilled continuously at Rate per
	// Period; it starts full. Refill arithmetic is exact (no rounding of
	// Period/Rate).
	TokenBucket Algorithm = "token_bucket"
	// FixedWindow admits at most Rate per window of Period, windows aligned
	// to the Unix epoch. Up to 2×Rate may pass across a window boundary.
	FixedWindow Algorithm = "fixed_window"
	// SlidingWindow approximates a sliding window with two counters: the
	// previous window's count weighted by how much of it still overlaps the
	// trailing Period, plus the current window's count. O(1) memory.
	SlidingWindow Algorithm = "sliding_window"
	// SlidingLog admits at most Rate in any trailing Period, exactly, by
	// keeping one timestamp per admitted request (with its cost), whatever
	// the cost. Memory is O(Rate) per key: up to one entry per unit when
	// every request costs 1; Rate is at most 100,000.
	SlidingLog Algorithm = "sliding_log"
	// LeakyBucket shapes traffic like nginx limit_req without nodelay:
	// requests leave at Rate per Period; up to Burst more wait in the queue,
	// and Result.Delay says how long to hold each; beyond that they are denied.
	LeakyBucket Algorithm = "leaky_bucket"
	// InFlight is not a rate: it caps the requests of a key in flight at
	// once. Rate is the number of slots n and Period the hold: a Take of
	// any cost n ≥ 1 takes one slot while fewer than Rate are taken, and
	// Store.Release gives it back; a slot never given back (its holder
	// vanished) is free again Period after it was taken. A refusal's
	// RetryAfter is the time until the earliest slot expires, at most 1 s
	// (a slot is usually released long before, which no store can
	// foresee). It takes no Burst nor Penalty; Rate is at most 100,000.
	// Result.Slot names the slot a Take took.
	InFlight Algorithm = "in_flight"
)

// Algorithms returns every rate algorithm, in a stable order, in a new
// slice. InFlight, a cap on concurrent requests rather than a rate, is not
// among them.
func Algorithms() []Algorithm {
	return []Algorithm{GCRA, TokenBucket, FixedWindow, SlidingWindow, SlidingLog, LeakyBucket}
}

// InfDuration is the RetryAfter of a request whose cost exceeds what the
// limit can ever admit at once: it will never pass.
const InfDuration = time.Duration(math.MaxInt64)

// Bounds on limit sizes. Every quantity the Algorithms compute is an integer
// number of microseconds (or microsecond-scaled tokens) that must stay exact
// in a Lua number (a float64), so products are kept below 2^53.
const (
	// maxSlidingLogRate is the largest Rate a SlidingLog limit accepts: it
	// stores one entry per admitted request, up to Rate of them.
	maxSlidingLogRate = 100_000
	// maxInFlightSlots is the largest Rate an InFlight limit accepts: it
	// stores one entry per slot taken, up to Rate of them.
	maxInFlightSlots = 100_000
	maxExact         = 1 << 53
)

// Limit describes one rate limit. The zero value is not valid: Rate and
// Period are required (but for a calendar window, made by PerCalendar or
// ParseLimit, whose unit and zone are kept unexported and whose Period
// stays 0). Limits are plain values, safe to copy and compare.
type Limit struct {
	Algorithm Algorithm     // zero value means GCRA
	Rate      int64         // events admitted per Period
	Period    time.Duration // a whole number of microseconds, at least 1µs
	// Burst is the capacity: how many may pass at once (TokenBucket, GCRA)
	// or wait in the queue (LeakyBucket). 0 selects the default, Rate.
	// FixedWindow, SlidingWindow and SlidingLog take no Burst.
	Burst int64
	// Penalty, when positive, locks the key for this long after a denial
	// by this limit: requests during the lock are denied without being
	// charged, and they do not extend it.
	Penalty time.Duration

	// A calendar window (PerCalendar): its unit ("day", "week" or
	// "month") and zone; "" and nil for every other limit.
	calendar string
	zone     *time.Location
}

// ErrInvalidLimit is wrapped by every error Limit.Spec returns.
var ErrInvalidLimit = errors.New("sluice: invalid limit")

func invalid(l Limit, format string, args ...any) error {
	return fmt.Errorf("%w %s: %s", ErrInvalidLimit, l.String(), fmt.Sprintf(format, args...))
}

// String renders l in the syntax ParseLimit reads, compactly: "30/m burst
// 16", "1000/3s fixed_window penalty 1m", "5/1m30s token_bucket". The
// algorithm is written unless it is empty (the zero value, GCRA), and
// Burst and Penalty unless they are 0, so that ParseLimit(l.String())
// returns l for every valid Limit (for a calendar window in a named zone,
// the same limit with the zone loaded anew: equal by String, one state in
// every store). Invalid limits render too, for messages.
func (l Limit) String() string {
	s := strconv.FormatInt(l.Rate, 10) + "/" + formatPeriod(l.Period)
	if l.calendar != "" {
		s = strconv.FormatInt(l.Rate, 10) + "/" + l.calendar + "@" + zoneName(l.zone)
		if l.Period != 0 {
			s += " period " + formatDuration(l.Period) // invalid: for messages only
		}
	}
	if l.Algorithm != "" && (l.calendar == "" || l.Algorithm != FixedWindow) {
		if a := string(l.Algorithm); isAlgorithmWord(a) {
			s += " " + a
		} else {
			s += " algorithm " + strconv.Quote(a)
		}
	}
	if l.Burst != 0 {
		s += " burst " + strconv.FormatInt(l.Burst, 10)
	}
	if l.Penalty != 0 {
		s += " penalty " + formatDuration(l.Penalty)
	}
	return s
}

// isAlgorithmWord reports whether a renders as one plain word.
func isAlgorithmWord(a string) bool {
	for i := 0; i < len(a); i++ {
		if c := a[i]; !(c >= 'a' && c <= 'z' || c == '_') {
			return false
		}
	}
	return a != ""
}

// Spec is a validated Limit in the integer units the Algorithms compute
// with: every duration in microseconds, defaults applied. Stores receive
// Specs; the only way to make a valid one is Limit.Spec. The zero Spec is
// not valid: every store rejects it (Rate 0). Specs are
// plain values, safe to copy and compare (equal Specs are the same limit).
type Spec struct {
	alg      Algorithm
	rate     int64          // R: events per Period
	period   int64          // P, µs
	burst    int64          // B after defaults (0 for the window Algorithms)
	penalty  int64          // µs, rounded up
	interval int64          // T = ceil(P/R) µs: the emission interval of GCRA and LeakyBucket (0 otherwise)
	calendar string         // PerCalendar's unit, "" for other limits
	zone     *time.Location // PerCalendar's zone
}

// Algorithm returns the algorithm, never empty (GCRA for a Limit without one).
func (s Spec) Algorithm() Algorithm { return s.alg }

// Rate returns R, the events admitted per Period.
func (s Spec) Rate() int64 { return s.rate }

// Period returns P in microseconds. For a calendar window (PerCalendar)
// it is the unit's nominal length (a day of 24 hours, a week of 7 days, a
// month of 31 days), the figure of the IETF policy's w; its windows are
// those of Calendar.
func (s Spec) Period() int64 { return s.period }

// Calendar returns the unit ("day", "week" or "month") and the zone of a
// calendar window made by PerCalendar, and "" and nil for every other
// limit. A store decides a calendar limit as a FixedWindow whose window
// holding an instant t runs from the start of t's day, week (from Monday)
// or month in zone to the start of the next, both at 00:00 local time (or
// the first instant after it, when a change of the zone's offset skips
// midnight): 23 or 25 hours across a daylight saving change.
func (s Spec) Calendar() (unit string, zone *time.Location) { return s.calendar, s.zone }

// Burst returns the Burst after defaults (Rate when the Limit had 0), and 0
// for the window Algorithms.
func (s Spec) Burst() int64 { return s.burst }

// Penalty returns the penalty lock in microseconds, rounded up; 0 for none.
func (s Spec) Penalty() int64 { return s.penalty }

// Interval returns T = ceil(P/R) in microseconds, the emission interval of
// GCRA and LeakyBucket, and 0 for the other Algorithms.
func (s Spec) Interval() int64 { return s.interval }

// Spec validates l and returns it in integer microseconds. It rejects a
// Rate or Period that is not positive, a negative Burst or Penalty, an
// unknown Algorithm, a Period that is not a whole number of microseconds,
// a Burst on an algorithm that has none, and sizes whose arithmetic would
// overflow, with an error wrapping ErrInvalidLimit.
func (l Limit) Spec() (Spec, error) { return l.normalize() }

// validate is Spec's error.
func (l Limit) validate() error {
	_, err := l.normalize()
	return err
}

func (l Limit) normalize() (Spec, error) {
	if l.calendar != "" {
		return l.normalizeCalendar()
	}
	s := Spec{alg: l.Algorithm, rate: l.Rate, burst: l.Burst}
	if s.alg == "" {
		s.alg = GCRA
	}
	f := facts[s.alg]
	if f == nil {
		return Spec{}, invalid(l, "unknown algorithm %q (want one of gcra, token_bucket, fixed_window, sliding_window, sliding_log, leaky_bucket, in_flight)", string(l.Algorithm))
	}
	if l.Rate <= 0 {
		return Spec{}, invalid(l, "rate must be positive")
	}
	if l.Period <= 0 {
		return Spec{}, invalid(l, "period must be positive")
	}
	if l.Period%time.Microsecond != 0 {
		return Spec{}, invalid(l, "period must be a whole number of microseconds")
	}
	if l.Burst < 0 {
		return Spec{}, invalid(l, "burst must not be negative")
	}
	if l.Penalty < 0 {
		return Spec{}, invalid(l, "penalty must not be negative")
	}
	s.period = int64(l.Period / time.Microsecond)
	// Rounded up without overflow: Penalty + 999ns would wrap near MaxInt64.
	s.penalty = int64(l.Penalty / time.Microsecond)
	if l.Penalty%time.Microsecond != 0 {
		s.penalty++
	}
	if s.period >= maxExact || s.penalty >= maxExact {
		return Spec{}, invalid(l, "period and penalty must be below 2^53 microseconds")
	}
	switch {
	case !f.burst && l.Burst != 0:
		return Spec{}, invalid(l, "%s takes no burst; leave Burst 0", string(s.alg))
	case f.burst && s.burst == 0:
		s.burst = s.rate
	case s.alg == InFlight && l.Penalty != 0:
		return Spec{}, invalid(l, "in_flight takes no penalty; leave Penalty 0")
	}
	if s.alg == GCRA || s.alg == LeakyBucket {
		s.interval = (s.period + s.rate - 1) / s.rate
	}
	if msg := f.bounds(&s); msg != "" {
		return Spec{}, invalid(l, "%s", msg)
	}
	return s, nil
}

// PerSecond returns a GCRA limit of rate events per second with Burst rate.
func PerSecond(rate int64) Limit {
	return Limit{Algorithm: GCRA, Rate: rate, Period: time.Second, Burst: rate}
}

// PerMinute returns a GCRA limit of rate events per minute with Burst rate.
func PerMinute(rate int64) Limit {
	return Limit{Algorithm: GCRA, Rate: rate, Period: time.Minute, Burst: rate}
}

// PerHour returns a GCRA limit of rate events per hour with Burst rate.
func PerHour(rate int64) Limit {
	return Limit{Algorithm: GCRA, Rate: rate, Period: time.Hour, Burst: rate}
}

// PerCalendar returns a quota of n per calendar day, week or month (unit
// "day", "week" or "month") in zone: a FixedWindow whose windows start at
// local midnight, on Mondays for weeks and on the 1st for months, so that
// a day lasts 23 or 25 hours across a daylight saving change and a month
// 28 to 31 days. Every store decides it at its own clock (Redis: its
// TIME) and reports the true end of the window in ResetAfter and
// RetryAfter. Its Period stays 0 (the calendar sets the windows); a
// Penalty may be set. A unit other than these three, a nil zone, or
// time.Local (whose meaning varies from one machine to the next: name
// the zone, with time.LoadLocation) makes a Limit that Spec (and so
// core.New) refuses. ParseLimit reads it as "10000/month@Europe/Berlin"
// ("10000/week" and "10000/month" are in UTC; "10000/day" is a period of
// 24 hours, "10000/day@UTC" a calendar day). Limits of zones that are not
// the same *time.Location are distinct limits to the memory store; the
// Redis store knows zones by name.
func PerCalendar(n int64, unit string, zone *time.Location) Limit {
	if calendarLength(unit) == 0 {
		unit = strconv.Quote(unit) // refused by Limit.Spec, and never empty
	}
	return Limit{Algorithm: FixedWindow, Rate: n, calendar: unit, zone: zone}
}

// MaxInFlight returns a limit of at most n requests of one client key in
// flight at once, across every process sharing the store: a request takes
// a slot when it is admitted and the adapters give it back when its
// handler returns (see core.Decision.Done). A slot whose holder vanished
// is free again hold after it was taken, so hold must exceed the longest
// request. A refusal's RetryAfter is the time until the earliest slot
// expires, at most 1 s. It combines with rate limits in one
// atomic decision. See InFlight.
func MaxInFlight(n int64, hold time.Duration) Limit {
	return Limit{Algorithm: InFlight, Rate: n, Period: hold}
}
