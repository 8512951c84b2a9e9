package echolimit

import (
	"errors"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/route"
)

// New returns echo middleware that limits requests with l. It panics if l
// is nil: that is a programming error, and serving unlimited instead would
// hide it. The middleware is safe for concurrent use.
//
// With several Limiters on a route (e.Use, a group's, the route's), the
// response carries the binding one's headers, and a handler reads that
// Decision with core.FromContext(c.Request().Context()).
func New(l *core.Limiter) echo.MiddlewareFunc {
	if l == nil {
		panic("echolimit.New: the *core.Limiter is nil")
	}
	m := &middleware{l: l}
	return m.handler
}

// middleware is what New returns, as a method value.
type middleware struct {
	l        *core.Limiter
	patterns route.Cache
}

func (m *middleware) handler(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		l := m.l
		r := c.Request()
		if p := m.pattern(c, r.Method); p != "" {
			r.Pattern = p
		}
		d := l.Decide(r)
		resp := c.Response()
		r = d.Stack(r, resp.Header())
		c.SetRequest(r)
		switch d.Action {
		case core.Serve:
			return serve(next, c, &d)
		case core.Hold:
			if d.Wait(r.Context()) == nil {
				return serve(next, c, &d)
			}
			d.Done(http.StatusServiceUnavailable) // not served: see Decision.Done
		}
		// Written here, once; returning an error instead would have
		// echo's error handler write a second response.
		d.WriteResponse(resp)
		return nil
	}
}

// serve calls next and, when d needs it, tells d the status of the
// response (see core.Decision.Done): the status written; for an error
// returned before anything was written, the code of an *echo.HTTPError
// (what echo's error handler writes), else 500; 500 when next panicked
// (the panic goes on).
func serve(next echo.HandlerFunc, c echo.Context, d *core.Decision) error {
	if !d.NeedsDone() {
		return next(c)
	}
	finished := false
	defer func() {
		if !finished {
			d.Done(http.StatusInternalServerError)
		}
	}()
	err := next(c)
	finished = true
	status := c.Response().Status
	if status == 0 {
		status = http.StatusOK
	}
	if err != nil && !c.Response().Committed {
		status = http.StatusInternalServerError
		var he *echo.HTTPError
		if errors.As(err, &he) {
			status = he.Code
		}
	}
	d.Done(status)
	return err
}

// pattern returns the route pattern of a request that echo routed to a
// handler for its method ("GET /users/:id"), or "". A method the router
// does not serve adds no key: echo answers 405 (and OPTIONS, for which it
// writes the Allow header) with the Context.Path of the route, and keying
// them "M0 /users/:id" would let a client make a key per invented method.
// A method outside the standard ones gets the template alone: echo also
// hands any method to a RouteNotFound handler, and nothing on the Context
// tells that from a route registered for the method.
func (m *middleware) pattern(c echo.Context, method string) string {
	path := c.Path()
	if path == "" || c.Get(echo.ContextKeyHeaderAllow) != nil {
		return ""
	}
	if !standardMethod(method) {
		return path
	}
	return m.patterns.Pattern(method, path)
}

// standardMethod reports whether m is one of the methods echo's router
// keeps apart by name: RFC 9110's, PATCH, and WebDAV's PROPFIND and
// REPORT.
func standardMethod(m string) bool {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete,
		http.MethodConnect, http.MethodOptions, http.MethodTrace, "PROPFIND", "REPORT":
		return true
	}
	return false
}
