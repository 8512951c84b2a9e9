package ginlimit

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/route"
)

// An Option configures the middleware (see OnRefuse). The core.Limiter
// holds everything else (limits, key, cost, failure policy, headers,
// responses).
// Options apply in order, a later one winning; nil options are skipped.
type Option func(*config)

type config struct {
	onRefuse func(*gin.Context, core.Decision)
}

// OnRefuse makes the middleware call f instead of writing the Limiter's
// response when a request is refused, or when a held request's context
// ends first. The chain is already aborted and the rate-limit headers (and
// Retry-After) are set when f runs; d.Outcome says why the request is
// refused and d.Response() what the middleware would have written. f must
// write a response.
func OnRefuse(f func(c *gin.Context, d core.Decision)) Option {
	return func(c *config) { c.onRefuse = f }
}

// New returns gin middleware that limits requests with l. It panics if l
// is nil: that is a programming error, and serving unlimited instead would
// hide it. The handler is safe for concurrent use.
//
// With several Limiters on a route (r.Use, a group's, the route's), the
// response carries the binding one's headers, and a handler reads that
// Decision with core.FromContext(c.Request.Context()).
func New(l *core.Limiter, opts ...Option) gin.HandlerFunc {
	if l == nil {
		panic("ginlimit.New: the *core.Limiter is nil")
	}
	var cfg config
	for _, opt := range opts {
		if opt != nil {
			opt(&cfg)
		}
	}
	onRefuse := cfg.onRefuse
	ipCheck := newGinIPCheck()
	return func(c *gin.Context) {
		ipCheck.examine(c)
		r := c.Request
		if p := route.Pattern(r.Method, c.FullPath()); p != "" {
			r.Pattern = p
		}
		d := l.Decide(r)
		r = d.Stack(r, c.Writer.Header())
		c.Request = r
		switch d.Action {
		case core.Serve:
			next(c, d)
			return
		case core.Hold:
			if d.Wait(r.Context()) == nil {
				next(c, d)
				return
			}
			d.Done(http.StatusServiceUnavailable) // not served: see Decision.Done
		}
		c.Abort()
		if onRefuse != nil {
			onRefuse(c, d)
			return
		}
		d.WriteResponse(c.Writer)
	}
}

// next runs the rest of the chain now when d needs to learn its status
// (see core.Decision.Done): c.Writer.Status() after it, 500 when it
// panicked (the panic goes on). Otherwise gin runs the chain after the
// middleware returns.
func next(c *gin.Context, d core.Decision) {
	if !d.NeedsDone() {
		return
	}
	finished := false
	defer func() {
		if !finished {
			d.Done(http.StatusInternalServerError)
		}
	}()
	c.Next()
	finished = true
	d.Done(c.Writer.Status())
}
