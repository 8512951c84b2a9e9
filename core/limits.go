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

// ErrNegativeCost is wrapped by the Event.Err of a request whose cost
// function returned a negative cost, and by WithCost's error for a
// negative cost. It is store.ErrNegativeCost.
var ErrNegativeCost = store.ErrNegativeCost
