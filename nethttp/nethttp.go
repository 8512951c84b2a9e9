package nethttp

import (
	"net/http"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/adapteropt"
)

// An Option configures the middleware (see OnRefuse). The core.Limiter
// holds everything else (limits, key, cost, failure policy, headers,
// responses).
type Option = adapteropt.Option[func(http.ResponseWriter, *http.Request, core.Decision)]

// OnRefuse makes the middleware call f instead of writing the Limiter's
// response when a request is refused, or when a held request's context
// ends first. The rate-limit headers (and Retry-After) are already set on
// w when f runs; d.Outcome says why the request is refused and
// d.Response() what the middleware would have written. f must write a
// response; the wrapped handler is not called.
func OnRefuse(f func(w http.ResponseWriter, r *http.Request, d core.Decision)) Option {
	return adapteropt.OnRefuse(f)
}

// Middleware returns middleware that limits the requests of the handler it
// wraps with l. It panics if l is nil: that is a programming error, and
// serving unlimited instead would hide it.
//
// The returned middleware and the handlers it makes are safe for
// concurrent use; per request, it allocates nothing beyond what l.Decide
// and core.Decision.Stack (the headers, and the request's record of its
// binding Decision for core.FromContext) need.
func Middleware(l *core.Limiter, opts ...Option) func(http.Handler) http.Handler {
	if l == nil {
		panic("nethttp.Middleware: the *core.Limiter is nil")
	}
	onRefuse := adapteropt.Apply(opts).OnRefuse
	return func(next http.Handler) http.Handler {
		if next == nil {
			panic("nethttp.Middleware: the next http.Handler is nil")
		}
		return &handler{l: l, next: next, onRefuse: onRefuse}
	}
}

type handler struct {
	l        *core.Limiter
	next     http.Handler
	onRefuse func(http.ResponseWriter, *http.Request, core.Decision)
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	d := h.l.Decide(r)
	r = d.Stack(r, w.Header())
	switch d.Action {
	case core.Serve:
		h.next.ServeHTTP(w, r)
		return
	case core.Hold:
		if d.Wait(r.Context()) == nil {
			h.next.ServeHTTP(w, r)
			return
		}
	}
	if h.onRefuse != nil {
		h.onRefuse(w, r, d)
		return
	}
	d.WriteResponse(w)
}
