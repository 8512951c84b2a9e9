package core

import (
	"context"
	"fmt"
	"net/http"

	"github.com/sluicehq/sluice/core/store"
)

// Status returns the client's quota as GitHub's /rate_limit shows it, and
// charges nothing: Limit, Remaining and ResetAfter are what the client can
// still do now, under the same key, plan and limits as Decide (Remaining
// equals the X-RateLimit-Remaining the last response sent, less what has
// refilled since); Allowed, RetryAfter and Delay say whether a request of
// r's cost would pass now. Use Result.ResetAt for the X-RateLimit-Reset a
// response now would send. Nothing is recorded: no state, no penalty lock,
// no observer call, no metric, no breaker count. Use it for a
// "GET /rate_limit" endpoint that shows clients their quota.
//
// It returns the zero Result and no error for a request the skip function
// exempts. It fails with the key function's error (or ErrNoKey) when the
// request has no key, with an error wrapping errors.ErrUnsupported when the
// store is not a store.Peeker, and with the store's error when it fails (within
// the Limiter's timeout); no failure policy applies.
func (l *Limiter) Status(r *http.Request) (store.Result, error) {
	if l.skip != nil && l.skip(r) {
		return store.Result{}, nil
	}
	key, err := l.key(r)
	if err == nil && key == "" {
		err = errEmptyKey
	}
	if err != nil {
		return store.Result{}, fmt.Errorf("sluice: status: %w", err)
	}
	cost := l.cost
	if l.costFunc != nil {
		if c := l.costFunc(r); c >= 0 {
			cost = c
		}
	}
	return l.peek(r.Context(), l.configFor(r), key, cost)
}

// StatusOf is Status for an administrator: the quota of the client key
// under plan ("" or an unknown plan: the Limiter's own limits), with
// Allowed and RetryAfter for a request of the Limiter's fixed cost
// (WithCost). key is what the key function returns for that client. It
// charges and records nothing, and fails like Status.
func (l *Limiter) StatusOf(ctx context.Context, key, plan string) (store.Result, error) {
	if key == "" {
		return store.Result{}, fmt.Errorf("sluice: status: %w", store.ErrEmptyKey)
	}
	return l.peek(ctx, l.configNamed(plan), key, l.cost)
}

func (l *Limiter) peek(ctx context.Context, cfg *limiterConfig, key string, cost int64) (store.Result, error) {
	p := l.store
	// Peek(0) gives the quota now; a second Peek of the request's cost
	// whether it would pass (a peek of cost n reports Remaining after n).
	res, err := p.Peek(ctx, l.keyPrefix+key, 0, cfg.take...)
	if err != nil {
		return store.Result{}, fmt.Errorf("sluice: status: %w", err)
	}
	res = cfg.fold(res)
	if cost == 0 {
		return res, nil
	}
	next, err := p.Peek(ctx, l.keyPrefix+key, cost, cfg.take...)
	if err != nil {
		return store.Result{}, fmt.Errorf("sluice: status: %w", err)
	}
	return withVerdict(res, cfg.fold(next)), nil
}

// withVerdict returns the quota now with the Allowed, RetryAfter and Delay
// of next, overall and per limit. When next is refused its binding limit
// (the refusing one) describes the quota, as in a refused response's
// headers.
func withVerdict(now, next store.Result) store.Result {
	if len(now.PerLimit) == 0 || len(now.PerLimit) != len(next.PerLimit) {
		now.Allowed, now.RetryAfter, now.Delay = next.Allowed, next.RetryAfter, next.Delay
		return now
	}
	per := make([]store.Result, len(now.PerLimit))
	for i := range per {
		per[i] = withVerdict(now.PerLimit[i], next.PerLimit[i])
	}
	out := now
	if !next.Allowed && next.Binding >= 0 && next.Binding < len(per) {
		out = per[next.Binding]
		out.Binding = next.Binding
	}
	out.Allowed, out.RetryAfter, out.Delay = next.Allowed, next.RetryAfter, next.Delay
	out.PerLimit = per
	return out
}

// ErrNothingReset is store.ErrNotFound: Reset and ResetRequest return an
// error wrapping it when the key held no state under any limit, neither in
// the store nor in the local fallback store: the key was mistyped, or is
// not the one the key function makes (see ResetRequest).
var ErrNothingReset = store.ErrNotFound

// Reset clears the client key's state under every limit the Limiter
// enforces (its own, every plan's and any guard of SetLimits or SetPlans),
// penalty locks included, so that the client's next request gets a full
// allowance. key is what the key function returns for the client (for a
// composed key function, see ResetRequest). Reset clears the state in the
// store and in the local fallback (FailLocal: the fallback store and the
// store's last answer for the key), the latter even when the store fails;
// a Redis store also tells the other processes sharing it, which drop what
// they keep of the key locally (deny caches, leases, fallbacks) within a
// round trip of Redis (see redisstore.Store.Reset).
//
// Reset is for administrators (unblocking a customer, a support tool); it
// is not counted as a decision. It uses ctx as given, without the
// Limiter's timeout. It fails with an error wrapping ErrNothingReset when
// the key had no state anywhere, store.ErrEmptyKey for an empty key,
// errors.ErrUnsupported when the store is not a store.Resetter, and the
// store's error when it fails: the local fallback store is cleared even
// then, and the key may be partly reset in the store; calling Reset again
// is safe.
func (l *Limiter) Reset(ctx context.Context, key string) error {
	if key == "" {
		return fmt.Errorf("sluice: reset: %w", store.ErrEmptyKey)
	}
	if err := l.store.Reset(ctx, l.keyPrefix+key, l.allLimits()...); err != nil {
		return fmt.Errorf("sluice: reset: %w", err)
	}
	return nil
}

// ResetRequest is Reset for the key the Limiter's key function gives r,
// for an operator who knows a client by what it sends (an API key, a
// token, an address) whatever the key function's composition: with
// keyfuncs.Fallback(apiKey, ip) the key of API key "k1" is "0:k1", and a
// request that carries "k1" as the client would resolves it. Build one
// with http.NewRequestWithContext and set only what the key function reads
// (the header, RemoteAddr, Pattern for keyfuncs.Route). It uses r's
// context, skips no request (the skip function is not consulted), and
// fails like Reset, or with the key function's error (or ErrNoKey).
func (l *Limiter) ResetRequest(r *http.Request) error {
	key, err := l.key(r)
	if err == nil && key == "" {
		err = errEmptyKey
	}
	if err != nil {
		return fmt.Errorf("sluice: reset: %w", err)
	}
	return l.Reset(r.Context(), key)
}
