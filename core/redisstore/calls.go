package redisstore

import (
	"context"
	"errors"

	"github.com/sluicehq/sluice/core/store"
)

// The Store's methods of store.Store go through its fallback (package
// internal/fallback, configured by WithTimeout and WithFallback): every
// call to Redis has the Store's deadline, and a decision Redis cannot
// make in time is made by the local fallback, its Result's Fallback
// saying why, unless the call is a core.Limiter's under FailOpen or
// FailClosed.

// Take charges n (n == 0 peeks) against every limit for key, atomically:
// either every limit allows and all are charged, or none is charged and
// only the penalty locks of the limits that denied are set. All limits
// are decided at one instant of Redis' clock. The Result describes the
// binding limit, PerLimit holding each limit's own in the order given (see
// store.Result).
//
// key may be any non-empty string: a key of 1 to 64 bytes of
// [A-Za-z0-9._:@/-] appears in the Redis key as is, any other is replaced
// by a hash of it, so keys can neither collide nor grow Redis keys without
// bound. Every Redis key of one Take shares one Cluster hash tag.
//
// Take returns an error wrapping store.ErrEmptyKey, store.ErrNegativeCost
// or store.ErrInvalidLimit for bad input. When Redis
// fails or is slower than the Store's timeout, the fallback decides (see
// WithFallback); with it off, or for a Limiter under FailOpen or FailClosed, Take returns the
// Redis client's error, wrapped: the call then charged nothing, or, when
// it failed after it was sent (a broken connection, a timeout), at most
// once (see the package doc, "Retries and Cluster redirects").
func (s *Store) Take(ctx context.Context, key string, n int64, limits ...store.Spec) (store.Result, error) {
	if s == nil || s.front == nil {
		return store.Result{}, errNotMade
	}
	return s.front.Take(ctx, key, n, limits...)
}

// Charge is Take through the take script, which also returns Redis' clock
// at the decision as the Result's Stamp, for Refund. It uses neither the
// lean scripts, nor the deny cache, nor leases: a key charged for a
// core.WithCountIf Limiter always takes the exact path.
func (s *Store) Charge(ctx context.Context, key string, n int64, limits ...store.Spec) (store.Result, error) {
	if s == nil || s.front == nil {
		return store.Result{}, errNotMade
	}
	return s.front.Charge(ctx, key, n, limits...)
}

// Peek returns exactly the Result that Take would return now, without
// charging anything or setting a penalty lock: the script decides the cost
// as Take does and writes nothing. It never answers from the deny cache.
// It fails like Take, and the fallback answers for Redis as in Take.
func (s *Store) Peek(ctx context.Context, key string, n int64, limits ...store.Spec) (store.Result, error) {
	if s == nil || s.front == nil {
		return store.Result{}, errNotMade
	}
	return s.front.Peek(ctx, key, n, limits...)
}

// Refund gives back n units that an allowed Charge of key over limits,
// whose Result's Stamp is stamp, took: in Redis, one call of the refund
// script, which applies ALGORITHMS.md's give-back to each limit at one
// instant of Redis' clock ("Giving back a charge"); for a charge the
// fallback made, in its local store. It never sets nor lifts a penalty
// lock. It fails like Take, without a fallback: the units may then have
// been given back or not.
func (s *Store) Refund(ctx context.Context, key string, n int64, stamp int64, limits ...store.Spec) error {
	if s == nil || s.front == nil {
		return errNotMade
	}
	return s.front.Refund(ctx, key, n, stamp, limits...)
}

// Release frees slot (a Result.Slot of key) in each InFlight limit of
// limits, one ZREM each (or in the local store, for a slot the fallback
// gave); other limits, and a slot not taken, are ignored. It fails like
// Take for a bad key or limit, at once with an error wrapping
// store.ErrBreakerOpen while the breaker of the key's server is open, and
// with the client's error, wrapped, when Redis fails: the slot is then
// free at the end of its hold.
func (s *Store) Release(ctx context.Context, key string, slot int64, limits ...store.Spec) error {
	if s == nil || s.front == nil {
		return errNotMade
	}
	return s.front.Release(ctx, key, slot, limits...)
}

// Reset deletes the state of key under each of limits, penalty locks
// included, in one DEL, with ctx as given. Then, before it returns, it
// drops what this Store keeps of the key (deny cache, leases, the
// fallback's state) and announces the key on the Pub/Sub channel
// <prefix>reset, so that every other Store on the same Redis and prefix
// drops it too, within a round trip of Redis (see WithDenyCache and
// WithLeases for a broken subscription).
//
// Reset fails with an error wrapping store.ErrNotFound when neither Redis
// nor the fallback held anything of the key (having still told the other
// processes), like Take for a bad key or limit, and with the client's
// error, wrapped, when Redis fails; the key may then be partly reset (the
// fallback's state is cleared whatever Redis does), and calling Reset
// again is safe. When the deletion ran but the announcement failed (a user
// without PUBLISH on the channel: see MinimalACL), the error says so.
func (s *Store) Reset(ctx context.Context, key string, limits ...store.Spec) error {
	if s == nil || s.front == nil {
		return errNotMade
	}
	return s.front.Reset(ctx, key, limits...)
}

// errNotMade is the error of a call on a Store not made by New.
var errNotMade = errors.New("redisstore: a Store not made by New")

// direct is the Store's calls to Redis, without the fallback: the backend
// of its front.
type direct struct{ s *Store }

func (d direct) Take(ctx context.Context, key string, n int64, limits ...store.Spec) (store.Result, error) {
	return d.s.takeRedis(ctx, key, n, limits...)
}

func (d direct) Charge(ctx context.Context, key string, n int64, limits ...store.Spec) (store.Result, error) {
	return d.s.chargeRedis(ctx, key, n, limits...)
}

func (d direct) Peek(ctx context.Context, key string, n int64, limits ...store.Spec) (store.Result, error) {
	return d.s.peekRedis(ctx, key, n, limits...)
}

func (d direct) Refund(ctx context.Context, key string, n int64, stamp int64, limits ...store.Spec) error {
	return d.s.refundRedis(ctx, key, n, stamp, limits...)
}

func (d direct) Release(ctx context.Context, key string, slot int64, limits ...store.Spec) error {
	return d.s.releaseRedis(ctx, key, slot, limits...)
}

func (d direct) Reset(ctx context.Context, key string, limits ...store.Spec) error {
	return d.s.resetRedis(ctx, key, limits...)
}
