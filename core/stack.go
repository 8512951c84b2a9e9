package core

import (
	"context"
	"net/http"
)

// Stack sets on h the rate-limit headers of d and returns the request to
// pass on (to the next handler, or to a refusal callback), whose context
// gives the binding Decision to FromContext. Adapters call it once per
// Limiter, right after Decide, before the handler runs.
//
// With several Limiters on a request (global, group, route), the headers
// are the binding Decision's: d when it refuses (none when no store
// decided); otherwise, of the Decisions with a store's Result, the one
// with the least Remaining (on ties the smaller Limit, then the earlier).
// A Decision without one (skipped, failed open, a key error served) binds
// only until one with a Result comes; the former headers are removed when
// the binding Decision changes. The first call allocates the request's
// record (its context, a shallow copy of r and the header values with
// their bytes); later calls update it in place and return r, so a
// request's Limiters must run one after another, as middleware chains do.
func (d Decision) Stack(r *http.Request, h http.Header) *http.Request {
	ctx := r.Context()
	s, ok := ctx.Value(stackKey{}).(*stacked)
	if !ok {
		// WithContext's copy is inlined and stays on the stack: the
		// request, its context and the header values with their bytes are
		// one allocation (BenchmarkStack).
		if d.l != nil && d.l.headers.ietf {
			sr := &stackedRequest[headerBlock]{c: stacked{Context: ctx, d: d}}
			d.writeHeaders(h, sr.hdr.vals[:], sr.hdr.buf[:])
			sr.r = *r.WithContext(&sr.c)
			return &sr.r
		}
		sr := &stackedRequest[legacyBlock]{c: stacked{Context: ctx, d: d}}
		d.writeHeaders(h, sr.hdr.vals[:], sr.hdr.buf[:])
		sr.r = *r.WithContext(&sr.c)
		return &sr.r
	}
	if !d.bindsOver(&s.d) {
		return r
	}
	if s.d.hasFigures() {
		for _, name := range stackedHeaders {
			delete(h, name)
		}
	}
	d.setHeaders(h, nil)
	s.d = d
	return r
}

// FromContext returns the binding Decision (see Decision.Stack) of the
// Limiters the request of ctx has passed, and whether there is one: a
// handler behind any adapter of this module can report the client's
// allowance in the body, say. It is safe to call from any goroutine once
// the Limiters have decided.
func FromContext(ctx context.Context) (Decision, bool) {
	s, ok := ctx.Value(stackKey{}).(*stacked)
	if !ok {
		return Decision{}, false
	}
	return s.d, true
}

// stackedRequest is the request the first Limiter passes on, its context
// and the first headers' values and their bytes (B: a legacyBlock, or a
// headerBlock for IETF fields), allocated together.
type stackedRequest[B any] struct {
	r   http.Request
	c   stacked
	hdr B
}

// stackKey is the context key of a request's stacked record.
type stackKey struct{}

// stacked is the context of a request once a Limiter has decided on it:
// its parent's, with the binding Decision, as its own context value (no
// further value context to allocate).
type stacked struct {
	context.Context
	d Decision
}

// Value returns c itself for stackKey, and the parent's value otherwise.
func (c *stacked) Value(key any) any {
	if key == (stackKey{}) {
		return c
	}
	return c.Context.Value(key)
}

// stackedHeaders are the headers setHeaders may set.
var stackedHeaders = [...]string{
	headerLimit, headerRemaining, headerReset, headerRetryAfter, headerRateLimit, headerRateLimitPolicy,
}

// hasFigures reports whether a store decided d, so that it has figures
// to send.
func (d *Decision) hasFigures() bool { return d.l != nil && d.Result.Limit != 0 }

// bindsOver reports whether d, made after b for the same request, binds
// instead of b (see Stack).
func (d *Decision) bindsOver(b *Decision) bool {
	switch {
	case d.Action == Refuse:
		return true
	case !d.hasFigures():
		return false
	case !b.hasFigures():
		return true
	case d.Result.Remaining != b.Result.Remaining:
		return d.Result.Remaining < b.Result.Remaining
	default:
		return d.Result.Limit < b.Result.Limit
	}
}
