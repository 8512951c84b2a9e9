// Package nethttp is sluice's net/http middleware: it applies a
// core.Limiter to the requests of the handlers it wraps.
//
// All decisions are the Limiter's (see core.Limiter.Decide); the middleware
// only carries them out. For every request it sets the rate-limit headers
// before the wrapped handler runs, so they are on every response of a
// limited route, then:
//
//   - serves the request;
//   - holds it for the delay a LeakyBucket limit asks for, then serves it,
//     or answers 503 if the request's context ends first (the client went
//     away, or a deadline passed);
//   - or refuses it with the Limiter's response: 429 with Retry-After and a
//     small JSON body when over the limit, 503 when the store is unavailable
//     under core.FailClosed, 403 for a request without a key under
//     core.KeyErrorDeny, or the Limiter's own (core.WithRefusal).
//
// After the handler it tells the Limiter the status written (a panic is a
// 500) when the Decision needs it (core.Decision.Done: a MaxInFlight slot,
// core.WithCountIf). The client never sees a 500 or an error text from the
// limiter.
//
// Wrap the handlers you register, not the whole ServeMux, when the key
// function looks at the route: ServeMux sets Request.Pattern (the route
// template that keyfuncs.Route uses) only once it has routed the request.
//
//	mux.Handle("GET /users/{id}", nethttp.Middleware(usersLimiter)(usersHandler))
//
// Each route or group of routes gets its own Limiter (with its own name in
// core.New); one Limiter may hold several limits.
package nethttp
