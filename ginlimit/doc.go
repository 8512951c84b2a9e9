// Package ginlimit is sluice's gin middleware: it applies a core.Limiter
// to the requests of the routes or groups it is used on.
//
// All decisions are the Limiter's (see core.Limiter.Decide); the
// middleware only carries them out, exactly as package nethttp does. For
// every request it sets Request.Pattern to the method and gin's route
// template (Context.FullPath) in http.ServeMux's form, "GET /users/:id", so
// that keyfuncs.Route and other key functions see the route and not the
// raw path, and GET and POST on one route apart, and sets the rate-limit
// headers before the rest of the chain runs, so they are on every response
// of a limited route. Then it lets the chain continue; or holds the request
// for a LeakyBucket delay first (answering 503 if the request's context
// ends during the wait); or aborts the chain (Context.Abort: no later
// handler runs) and writes the Limiter's response: 429 with Retry-After
// and a small JSON body when over the limit, 503 when the store is
// unavailable under core.FailClosed, 403 for a request without a key under
// core.KeyErrorDeny, or the Limiter's own (core.WithRefusal).
//
// The client never sees a 500 or an error text from the limiter.
//
// # Client addresses
//
// The Limiter's key function says who the client is; gin's client-IP
// settings (Engine.SetTrustedProxies, RemoteIPHeaders, TrustedPlatform,
// the Context.ClientIP they drive) are not used: keyfuncs.IP reads
// forwarding headers only from the proxies given to
// keyfuncs.WithTrustedProxies, and never, as gin does by default, from
// every peer. A deployment that declares its proxies to gin alone would
// have every client keyed by its proxy, so the middleware examines the
// first 1,024 requests it serves and, when gin resolves one's client
// through a proxy or platform header its settings trust, logs a warning
// once (slog.Default) naming the option to set. Declare the proxies to
// keyfuncs.IP; to have c.ClientIP() agree, give gin the same list, or
// none (Engine.SetTrustedProxies(nil)).
//
//	api := router.Group("/api", ginlimit.New(apiLimiter))
//	router.GET("/login", ginlimit.New(loginLimiter), login)
package ginlimit
