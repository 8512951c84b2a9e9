// Package nofallback carries, in a context, a Limiter's failure policy to
// the store: core.Limiter marks its calls under FailOpen and FailClosed,
// and the Redis store's fallback (internal/fallback) then returns the
// backend's error instead of deciding locally.
package nofallback

import "context"

type key struct{}

// Mark returns ctx marked: a store's fallback must not decide its calls.
func Mark(ctx context.Context) context.Context { return context.WithValue(ctx, key{}, true) }

// Allowed reports whether a store's fallback may decide a call made with
// ctx: true unless ctx comes from Mark.
func Allowed(ctx context.Context) bool { return ctx.Value(key{}) == nil }
