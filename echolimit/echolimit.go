package echolimit

import (
	"github.com/labstack/echo/v4"

	"github.com/sluicehq/sluice/core"
)

// An Option configures the middleware. The core.Limiter holds everything
// else (limits, key, cost, failure policy, headers, responses).
type Option func(*config)

type config struct {
	onRefuse func(echo.Context, core.Decision) error
}

// OnRefuse makes the middleware return f(c, d) instead of writing the
// Limiter's response when a request is refused, or when a held request's
// context ends first. The rate-limit headers (and Retry-After) are set when
// f runs; d.Outcome says why the request is refused and d.Response() what
// the middleware would have written. f either writes a response and
// returns nil, or returns an error (such as echo.NewHTTPError) for echo's
// HTTPErrorHandler to answer; the next handler is not called.
func OnRefuse(f func(c echo.Context, d core.Decision) error) Option {
	return func(c *config) { c.onRefuse = f }
}

// New returns echo middleware that limits requests with l. It panics if l
// is nil: that is a programming error, and serving unlimited instead would
// hide it. The middleware is safe for concurrent use.
func New(l *core.Limiter, opts ...Option) echo.MiddlewareFunc {
	if l == nil {
		panic("echolimit.New: the *core.Limiter is nil")
	}
	var cfg config
	for _, opt := range opts {
		if opt != nil {
			opt(&cfg)
		}
	}
	onRefuse := cfg.onRefuse
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			r := c.Request()
			if p := c.Path(); p != "" {
				r.Pattern = p
			}
			d := l.Decide(r)
			resp := c.Response()
			d.SetHeaders(resp.Header())
			switch d.Action {
			case core.Serve:
				return next(c)
			case core.Hold:
				if d.Wait(r.Context()) == nil {
					return next(c)
				}
			}
			if onRefuse != nil {
				return onRefuse(c, d)
			}
			// Written here, once; returning an error instead would have
			// echo's error handler write a second response.
			d.WriteResponse(resp)
			return nil
		}
	}
}
