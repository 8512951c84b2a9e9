package core

import (
	"context"
	"fmt"
	"net/http"

	"github.com/sluicehq/sluice/core/store"
)

// Status returns the client's quota as GitHub's /rate_limit shows it, for
// the key, plan and limits Decide would use, charging and recording
// nothing (no state, lock, observer call or metric): Limit, Remaining and
// ResetAfter are what the client can still do now, and Allowed, RetryAfter
// and Delay whether a request of r's cost would pass; Result.ResetAt gives
// the X-RateLimit-Reset a response would send. It returns the zero Result
// for a request the skip function exempts, and fails with the key
// function's error (or ErrNoKey) or the store's (no failure policy
// applies; the Redis store's fallback answers while Redis is away). An
// administrator asks for a client with a request that carries what the key
// function reads (the header, RemoteAddr, Pattern).
func (l *Limiter) Status(r *http.Request) (store.Result, error) {
	if l.skip != nil && l.skip(r) {
		return store.Result{}, nil
	}
	key, err := l.keyOf(r)
	if err != nil {
		return store.Result{}, fmt.Errorf("sluice: status: %w", err)
	}
	cost, _ := l.cost(r)
	cfg := l.configFor(r)
	// Peek(0) gives the quota now; a second Peek of the request's cost
	// whether it would pass (a peek of cost n reports Remaining after n).
	res, err := l.store.Peek(r.Context(), l.keyPrefix+key, 0, cfg.take...)
	if err != nil {
		return store.Result{}, fmt.Errorf("sluice: status: %w", err)
	}
	res = cfg.fold(res)
	if cost == 0 {
		return res, nil
	}
	next, err := l.store.Peek(r.Context(), l.keyPrefix+key, cost, cfg.take...)
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

// Reset clears the state of the client key (as the key function returns
// it) under every limit the Limiter enforces (its own, every plan's and
// any guard), penalty locks included, so that its next request gets a full
// allowance. The store also clears what it keeps locally (the Redis store:
// its fallback, deny cache and leases, in every process sharing Redis).
// Reset is for administrators; it is no decision, and uses ctx as given.
// It fails with an error wrapping store.ErrNotFound when the key had no
// state, store.ErrEmptyKey for "", and the store's error when it fails
// (the key may then be partly reset; calling Reset again is safe).
func (l *Limiter) Reset(ctx context.Context, key string) error {
	if key == "" {
		return fmt.Errorf("sluice: reset: %w", store.ErrEmptyKey)
	}
	if err := l.store.Reset(ctx, l.keyPrefix+key, l.allLimits()...); err != nil {
		return fmt.Errorf("sluice: reset: %w", err)
	}
	return nil
}
