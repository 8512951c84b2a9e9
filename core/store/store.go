package store

import (
	"context"
	"errors"
	"time"
)

// Result is the outcome of Store.Take. With several limits it describes the
// binding one: when denied, the denying limit with the longest RetryAfter;
// when allowed, the limit with the least Remaining (the first on ties).
// PerLimit then holds every limit's own Result, in the order given.
type Result struct {
	Allowed    bool
	Limit      int64         // the figure for X-RateLimit-Limit
	Remaining  int64         // the figure for X-RateLimit-Remaining
	RetryAfter time.Duration // 0 when allowed; InfDuration when this cost can never pass
	ResetAfter time.Duration // until the key is back to its full allowance
	Delay      time.Duration // LeakyBucket only: how long to hold the request before serving it

	// Binding is the index, in the limits passed to Take, of the limit this
	// Result describes.
	Binding int
	// PerLimit holds one Result per limit when Take was given more than
	// one (their own PerLimit is nil); nil for a single limit.
	PerLimit []Result

	// Slot names the slot an allowed, charged Take took of its InFlight
	// limits (one id for all of them), for Releaser.Release; 0 when it
	// took none.
	Slot int64

	// Stamp is the store's clock, in µs, at which Refunder.Charge decided,
	// for Refunder.Refund; 0 when the store does not say (Take may).
	Stamp int64
}

// ResetAt returns the instant X-RateLimit-Reset names for r decided at
// now: now plus ResetAfter, rounded up to the whole second. A status
// endpoint reports r.ResetAt(time.Now()) (or the Limiter's clock) so that
// it agrees with the headers.
func (r Result) ResetAt(now time.Time) time.Time {
	sec := now.Unix() + int64(r.ResetAfter/time.Second)
	ns := int64(now.Nanosecond()) + int64(r.ResetAfter%time.Second)
	sec += ns / int64(time.Second)
	if ns%int64(time.Second) > 0 {
		sec++
	}
	return time.Unix(sec, 0)
}

// Store decides and records rate-limit state. Implementations must be safe
// for concurrent use and decide atomically.
type Store interface {
	// Take charges n (n == 0 peeks) against every limit for key atomically:
	// either all allow and all are charged, or none is charged. A limit
	// that fails Spec.Validate (the zero Spec) is an error wrapping
	// ErrInvalidLimit.
	Take(ctx context.Context, key string, n int64, limits ...Spec) (Result, error)
}

// Errors a Store returns for bad input. They are wrapped with context; test
// with errors.Is.
var (
	ErrEmptyKey     = errors.New("sluice: empty key")
	ErrNegativeCost = errors.New("sluice: negative cost")
	ErrNoLimits     = errors.New("sluice: no limits")
)

// ErrNotFound is wrapped by the error Resetter.Reset returns when the key
// held no state under any of the limits: nothing was reset.
var ErrNotFound = errors.New("sluice: the key has no state under any of the limits")

// ErrBreakerOpen is wrapped by the error a Store returns when it knows,
// without trying, that it cannot answer now: its circuit breaker for the
// server that holds the key is open (see the redisstore package). A
// Limiter then follows its failure policy at once.
var ErrBreakerOpen = errors.New("sluice: circuit breaker open, store not called")

// ErrOutOfMemory is wrapped by the error a Store returns when its backend
// refused to write state for lack of memory (Redis' OOM reply under
// maxmemory with noeviction). The call charged nothing; the Limiter
// follows its failure policy.
var ErrOutOfMemory = errors.New("sluice: store out of memory")

// Combine returns the overall Result of a Take over several limits from each
// limit's own Result, in the order the limits were given: the binding
// limit's figures (see Result), Delay the largest of all, and PerLimit set to
// perLimit when it holds more than one Result. Store implementations use it;
// perLimit must not be empty.
func Combine(perLimit []Result) Result {
	if len(perLimit) == 1 {
		r := perLimit[0]
		r.Binding, r.PerLimit = 0, nil
		return r
	}
	allowed := true
	for i := range perLimit {
		if !perLimit[i].Allowed {
			allowed = false
			break
		}
	}
	binding := -1
	var delay time.Duration
	for i := range perLimit {
		r := &perLimit[i]
		if r.Delay > delay {
			delay = r.Delay
		}
		switch {
		case allowed:
			if binding < 0 || r.Remaining < perLimit[binding].Remaining {
				binding = i
			}
		case !r.Allowed:
			if binding < 0 || r.RetryAfter > perLimit[binding].RetryAfter {
				binding = i
			}
		}
	}
	out := perLimit[binding]
	out.Binding = binding
	out.Slot = slotOf(perLimit)
	out.PerLimit = perLimit
	if allowed {
		out.Delay = delay
	} else {
		out.Delay = 0
	}
	return out
}

// slotOf returns the slot of a Take's limits: the one their Results name.
func slotOf(perLimit []Result) int64 {
	for i := range perLimit {
		if perLimit[i].Slot != 0 {
			return perLimit[i].Slot
		}
	}
	return 0
}

// Peeker is a Store that can tell what a Take would return without
// making it. core.Limiter.Status uses it; the memory store and the Redis store
// implement it.
type Peeker interface {
	// Peek returns exactly the Result that Take(ctx, key, n, limits...)
	// would return at this instant, and changes nothing: no state is
	// charged and no penalty lock is set. It takes the arguments and
	// returns the errors of Take.
	Peek(ctx context.Context, key string, n int64, limits ...Spec) (Result, error)
}

// Resetter is a Store that can forget a key. core.Limiter.Reset uses it;
// the memory store and the Redis store implement it.
type Resetter interface {
	// Reset deletes the state of key under each of limits, penalty locks
	// included, so that the key's next Take sees a fresh allowance. A
	// store shared between processes also drops whatever it or the other
	// processes keep of key locally before Reset returns or shortly after
	// (the Redis store: see its documentation). Limits that hold no state
	// for key are ignored; when none held any, it returns an error
	// wrapping ErrNotFound (having still told the other processes). It
	// returns the errors of Take for a bad key or limit, and the store's
	// error when it fails; a failed Reset may have cleared some of the
	// limits and can be repeated.
	Reset(ctx context.Context, key string, limits ...Spec) error
}

// Releaser is a Store that can give back an InFlight slot before its hold
// ends. core.Limiter releases the slot of a request when its handler
// returns; the memory store and the Redis store implement it.
type Releaser interface {
	// Release frees slot (a Result.Slot of key) in each InFlight limit of
	// limits; other limits are ignored, and so is a slot already free or
	// expired. It returns the errors of Take for a bad key or limit, and
	// the store's error when it fails; the slot is then free at the end
	// of its hold.
	Release(ctx context.Context, key string, slot int64, limits ...Spec) error
}

// Refunder is a Store that can give back what it charged, for a Limiter
// that counts requests by their outcome (core.WithCountIf). The memory
// store and the Redis store implement it.
type Refunder interface {
	// Charge is Take, and sets the Result's Stamp, which Refund needs.
	Charge(ctx context.Context, key string, n int64, limits ...Spec) (Result, error)
	// Refund gives back n units that an allowed Charge of key over limits
	// made at stamp charged, with each algorithm's give-back in
	// ALGORITHMS.md: never more capacity than the charge took, a window's
	// count only while that window is current (or, for SlidingWindow,
	// the previous one), no unit of a SlidingLog after it has expired. It
	// never sets nor lifts a penalty lock. It returns the errors of Take
	// for bad input, and the store's error when it fails; a failed Refund
	// gave back nothing or everything it could.
	Refund(ctx context.Context, key string, n int64, stamp int64, limits ...Spec) error
}

// ResetNotifier is a Store shared between processes that tells of the
// keys reset through any of them (the Redis store does). The core.Limiters
// of a process on such a store register once with OnReset (at the first
// New on the store), so that a Reset made anywhere also clears their
// shared local fallback.
type ResetNotifier interface {
	// OnReset registers f, called with the store key of every Reset,
	// made through this process or another, shortly after it; and with ""
	// when resets may have been missed (so that everything kept locally is
	// to be dropped). f must not block. It returns a function that removes
	// the registration; it may be called more than once.
	OnReset(f func(key string)) (remove func())
}

// Fleet is a Store shared between processes that knows how many of them
// share it (the Redis store does). A core.Limiter's local fallback uses it
// to take only its share of a key's allowance while the store is away.
type Fleet interface {
	// Instances returns the number of processes sharing the store, as last
	// learned while the store answered (kept through an outage), or 0
	// when it is not known yet.
	Instances() int
}
