package core

import (
	"time"

	"github.com/sluicehq/sluice/core/store"
)

// Limit describes one rate limit; see store.Limit. It is an alias, so that
// users of the Limiter need only this package.
type Limit = store.Limit

// Algorithm names a rate-limiting algorithm; see store.Algorithm.
type Algorithm = store.Algorithm

// Result is the outcome of a store's Take; see store.Result.
type Result = store.Result

// The algorithms, as in package store (see ALGORITHMS.md).
const (
	GCRA          = store.GCRA
	TokenBucket   = store.TokenBucket
	FixedWindow   = store.FixedWindow
	SlidingWindow = store.SlidingWindow
	SlidingLog    = store.SlidingLog
	LeakyBucket   = store.LeakyBucket
	InFlight      = store.InFlight
)

// InfDuration is the RetryAfter of a request whose cost exceeds what the
// limit can ever admit at once: it will never pass.
const InfDuration = store.InfDuration

// ErrInvalidLimit is wrapped by the error of every invalid Limit (New,
// SetLimits, SetPlans, ParseLimit, Limit.Validate). It is
// store.ErrInvalidLimit, so errors.Is matches either.
var ErrInvalidLimit = store.ErrInvalidLimit

// ErrBreakerOpen is wrapped by the Event.Err of a decision whose store
// refused to try because its circuit breaker is open; the failure policy
// then decided at once. It is store.ErrBreakerOpen.
var ErrBreakerOpen = store.ErrBreakerOpen

// ErrOutOfMemory is wrapped by the Event.Err of a decision whose store had
// no memory left to write state (Redis' OOM). It is store.ErrOutOfMemory.
var ErrOutOfMemory = store.ErrOutOfMemory

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

// MaxInFlight returns a limit of at most n requests of one client key in
// flight at once, across every process sharing the store: a request takes
// a slot when it is admitted and the adapters give it back when its
// handler returns (see Decision.Done). A slot whose holder vanished (its
// process killed, its network gone) is free again hold after it was taken,
// so hold must exceed the longest request. A refusal's RetryAfter is the
// time until the earliest slot expires, at most store.InFlightRetryAfter
// (1 s). It combines with rate limits in one atomic decision. n must be at
// least 1 and hold a positive whole number of microseconds (see
// store.InFlight; Limiter New validates it).
func MaxInFlight(n int64, hold time.Duration) Limit {
	return Limit{Algorithm: InFlight, Rate: n, Period: hold}
}

// ErrNegativeCost is wrapped by the Event.Err of a request whose cost
// function returned a negative cost, and by WithCost's error for a
// negative cost. It is store.ErrNegativeCost.
var ErrNegativeCost = store.ErrNegativeCost
