package core

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/sluicehq/sluice/core/store"
)

// errNoPeek and errNoReset report a store that cannot serve Status or
// Reset; they wrap errors.ErrUnsupported.
var (
	errNoPeek  = fmt.Errorf("sluice: the store cannot peek (it is not a store.Peeker): %w", errors.ErrUnsupported)
	errNoReset = fmt.Errorf("sluice: the store cannot reset (it is not a store.Resetter): %w", errors.ErrUnsupported)
)

// Status returns the Result that r would get from the store now, and
// charges nothing: the same key, plan, cost and limits as Decide, decided
// by the store's Peek (see store.Peeker), so Allowed, Remaining, RetryAfter and
// ResetAfter are exactly what a request at this instant would see
// (Remaining after its cost). Nothing is recorded: no state, no penalty
// lock, no observer call, no metric, no breaker count. Use it for a
// "GET /rate_limit" endpoint that shows clients their quota.
//
// It returns the zero Result and no error for a request the skip function
// exempts. It fails with the key function's error (or ErrNoKey) when the
// request has no key, with an error wrapping errors.ErrUnsupported when the
// store is not a store.Peeker, and with the store's error when it fails (within
// the Limiter's timeout); no failure policy applies.
func (l *Limiter) Status(r *http.Request) (Result, error) {
	if l.skip != nil && l.skip(r) {
		return Result{}, nil
	}
	key, err := l.key(r)
	if err == nil && key == "" {
		err = errEmptyKey
	}
	if err != nil {
		return Result{}, fmt.Errorf("sluice: status: %w", err)
	}
	cost := l.cost
	if l.costFunc != nil {
		if c := l.costFunc(r); c >= 0 {
			cost = c
		}
	}
	return l.peek(r.Context(), l.configFor(r), key, cost)
}

// StatusOf is Status for an administrator: the Result a request of the
// Limiter's fixed cost (WithCost) from the client key, under plan ("" or
// an unknown plan: the Limiter's own limits), would get now. key is what
// the key function returns for that client. It charges and records
// nothing, and fails like Status.
func (l *Limiter) StatusOf(ctx context.Context, key, plan string) (Result, error) {
	if key == "" {
		return Result{}, fmt.Errorf("sluice: status: %w", store.ErrEmptyKey)
	}
	return l.peek(ctx, l.configNamed(plan), key, l.cost)
}

func (l *Limiter) peek(ctx context.Context, cfg *limiterConfig, key string, cost int64) (Result, error) {
	p, ok := l.store.(store.Peeker)
	if !ok {
		return Result{}, errNoPeek
	}
	if l.timeout > 0 && !l.local {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, l.timeout)
		defer cancel()
	}
	res, err := p.Peek(ctx, l.keyPrefix+key, cost, cfg.take...)
	if err != nil {
		return Result{}, fmt.Errorf("sluice: status: %w", err)
	}
	return cfg.fold(res), nil
}

// Reset clears the client key's state under every limit the Limiter
// enforces (its own, every plan's and any guard of SetLimits or SetPlans),
// penalty locks included, so that the client's next request gets a full
// allowance. key is what the key function returns for the client. Reset
// clears the state in the store and in the local fallback (FailLocal: the
// fallback store and the store's last answer for the key), the latter
// even when the store fails; a Redis store also tells the other processes sharing it,
// which drop what they keep of the key locally (their deny caches and
// fallbacks) within a round trip of Redis (see the redisstore package).
//
// Reset is for administrators (unblocking a customer, a support tool); it
// is not counted as a decision. It uses ctx as given, without the
// Limiter's timeout. It fails with an error wrapping store.ErrEmptyKey for an
// empty key, errors.ErrUnsupported when the store is not a store.Resetter, and
// the store's error when it fails (the key may then be partly reset;
// calling Reset again is safe).
func (l *Limiter) Reset(ctx context.Context, key string) error {
	if key == "" {
		return fmt.Errorf("sluice: reset: %w", store.ErrEmptyKey)
	}
	r, ok := l.store.(store.Resetter)
	if !ok {
		return errNoReset
	}
	storeKey := l.keyPrefix + key
	limits := l.allLimits()
	err := r.Reset(ctx, storeKey, limits...)
	// The local fallback forgets the key even when the store failed, so
	// that a Reset made while the store is away holds in this process.
	l.forgetLocal(storeKey, limits)
	if err != nil {
		return fmt.Errorf("sluice: reset: %w", err)
	}
	return nil
}

// forgetLocal clears storeKey in the local fallback: the remembered
// answer and the fallback store's state under limits.
func (l *Limiter) forgetLocal(storeKey string, limits []store.Spec) {
	if l.shared != nil {
		l.shared.forget(storeKey, limits)
		return
	}
	if l.fallback == nil || l.fallback == l.store {
		return
	}
	if r, ok := l.fallback.(store.Resetter); ok {
		_ = r.Reset(context.Background(), storeKey, limits...) // a memory store fails only on bad input
	}
}
