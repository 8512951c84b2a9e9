// Package echolimit is sluice's echo (v4) middleware: it applies a
// core.Limiter to the requests of the routes or groups it is used on.
//
// All decisions are the Limiter's (see core.Limiter.Decide); the
// middleware only carries them out, exactly as package nethttp does. For
// every request it sets Request.Pattern to the method and echo's route
// template (Context.Path) in http.ServeMux's form, "GET /users/:id", so
// that keyfuncs.Route and other key functions see the route and not the
// raw path, and GET and POST on one route apart. A request whose method
// the route does not serve (echo's 405, and the OPTIONS it answers itself)
// gets no pattern, as one that matched no route, so invented methods add
// no keys; a method other than RFC 9110's, PATCH, PROPFIND and REPORT gets
// the template alone ("/cache"), since echo hands any method to a
// RouteNotFound handler.
//
// The middleware sets the rate-limit headers before calling the next
// handler, so they are on every response of a limited route. Then it
// calls the next handler; or holds the request
// for a LeakyBucket delay first (answering 503 if the request's context
// ends during the wait); or writes the Limiter's response and returns nil
// without calling the next handler: 429 with Retry-After and a small JSON
// body when over the limit, 503 when the store is unavailable under
// core.FailClosed, 403 for a request without a key under
// core.KeyErrorDeny, or the Limiter's own (core.WithRefusal). The refusal
// is written once, by the middleware; it is never passed to echo's
// HTTPErrorHandler (which would write a second response).
//
// The client never sees a 500 or an error text from the limiter.
//
// Register it with Echo.Use or Group.Use (or per route), not Echo.Pre:
// pre-middleware runs before routing, when Context.Path is still empty.
//
//	api := e.Group("/api", echolimit.New(apiLimiter))
//	e.POST("/login", login, echolimit.New(loginLimiter))
package echolimit
