package ginlimit

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/route"
)

// New returns gin middleware that limits requests with l. It panics if l
// is nil: that is a programming error, and serving unlimited instead would
// hide it. The handler is safe for concurrent use.
//
// With several Limiters on a route (r.Use, a group's, the route's), the
// response carries the binding one's headers, and a handler reads that
// Decision with core.FromContext(c.Request.Context()).
func New(l *core.Limiter) gin.HandlerFunc {
	if l == nil {
		panic("ginlimit.New: the *core.Limiter is nil")
	}
	ipCheck := newGinIPCheck()
	patterns := new(route.Cache)
	return func(c *gin.Context) {
		ipCheck.examine(c)
		r := c.Request
		if p := patterns.Pattern(r.Method, c.FullPath()); p != "" {
			r.Pattern = p
		}
		d := l.Decide(r)
		r = d.Stack(r, c.Writer.Header())
		c.Request = r
		switch d.Action {
		case core.Serve:
			next(c, &d)
			return
		case core.Hold:
			if d.Wait(r.Context()) == nil {
				next(c, &d)
				return
			}
			d.Done(http.StatusServiceUnavailable) // not served: see Decision.Done
		}
		c.Abort()
		d.WriteResponse(c.Writer)
	}
}

// next runs the rest of the chain now when d needs to learn its status
// (see core.Decision.Done): c.Writer.Status() after it, 500 when it
// panicked (the panic goes on). Otherwise gin runs the chain after the
// middleware returns.
func next(c *gin.Context, d *core.Decision) {
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
