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
	// limits (one id for all of them), for Store.Release; 0 when it took
	// none.
	Slot int64

	// Stamp identifies the decision of a Charge for Refund (the store's
	// clock at it, in µs); 0 from Take and Peek.
	Stamp int64

	// Fallback is set when the store decided without its backend, which
	// failed with this error: the Redis store's local fallback while Redis
	// is away (see package redisstore). nil when the backend decided.
	Fallback error
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

// Store decides and records rate-limit state: every store offers every
// method, so that a wrapper (tracing, a test double) keeps them all by
// embedding a Store. A store that cannot do one returns an error wrapping
// errors.ErrUnsupported. Implementations must be safe for concurrent use
// and decide atomically; the memory store and the Redis store implement
// every method, and core/storetest checks a Store against this contract.
//
// Every method fails with an error wrapping ErrEmptyKey, ErrNegativeCost
// or ErrInvalidLimit (no limits, or an invalid Spec, such
// as the zero Spec) for bad input, and with the store's own error when it
// fails.
type Store interface {
	// Take charges n (n == 0 peeks) against every limit for key atomically:
	// either all allow and all are charged, or none is charged and only the
	// penalty locks of the limits that denied are set.
	Take(ctx context.Context, key string, n int64, limits ...Spec) (Result, error)
	// Charge is Take, and sets the Result's Stamp, which Refund needs.
	Charge(ctx context.Context, key string, n int64, limits ...Spec) (Result, error)
	// Peek returns exactly the Result that Take(ctx, key, n, limits...)
	// would return at this instant, and changes nothing: no state is
	// charged and no penalty lock is set.
	Peek(ctx context.Context, key string, n int64, limits ...Spec) (Result, error)
	// Refund gives back n units that an allowed Charge of key over limits
	// charged, stamp being its Result's Stamp, with each algorithm's
	// give-back in ALGORITHMS.md: never more capacity than the charge
	// took, a window's count only while that window is current (or, for
	// SlidingWindow, the previous one), no unit of a SlidingLog after it
	// has expired. It never sets nor lifts a penalty lock. A failed Refund
	// gave back nothing or everything it could.
	Refund(ctx context.Context, key string, n int64, stamp int64, limits ...Spec) error
	// Release frees slot (a Result.Slot of key) in each InFlight limit of
	// limits; other limits are ignored, and so is a slot already free or
	// expired. After a failed Release the slot is free at the end of its
	// hold.
	Release(ctx context.Context, key string, slot int64, limits ...Spec) error
	// Reset deletes the state of key under each of limits, penalty locks
	// included, so that the key's next Take sees a fresh allowance; a store
	// shared between processes also has them drop what they keep of key
	// locally. When no limit held state for key, it returns an error
	// wrapping ErrNotFound. A failed Reset may have cleared some of the
	// limits and can be repeated.
	Reset(ctx context.Context, key string, limits ...Spec) error
}

// Stats is what a store reports of its health, for metrics (see
// promlimit.WithStoreStats and otellimit.WithStoreStats); the Redis
// store's Stats method returns it.
type Stats struct {
	// Instances is the number of processes sharing the backend, as last
	// counted; 0 when it is not known (the fallback then takes a whole
	// allowance: alert on it).
	Instances int
	// Breakers holds, for each server, whether its circuit breaker is
	// open (decisions of its keys go to the fallback).
	Breakers map[string]bool
	// Debts is the number of keys whose local admissions are not yet
	// charged to the backend, and OldestDebt how long the oldest has
	// waited: debts older than a few seconds while the backend answers
	// mean the charges are failing.
	Debts      int
	OldestDebt time.Duration
	// Warnings counts, by kind, what the store warned of (and logged):
	// "eviction", "evicted", "restart", "unchecked", "fleet",
	// "permission".
	Warnings map[string]int64
}

// Errors a Store returns for bad input. They are wrapped with context; test
// with errors.Is.
var (
	ErrEmptyKey     = errors.New("sluice: empty key")
	ErrNegativeCost = errors.New("sluice: negative cost")
)

// ErrNotFound is wrapped by the error Store.Reset returns when the key
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
