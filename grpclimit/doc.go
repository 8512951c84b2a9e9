// Package grpclimit applies a sluice Limiter (package core) to gRPC
// servers: UnaryServerInterceptor and StreamServerInterceptor.
//
//	apiKey, err := keyfuncs.Header("x-api-key") // metadata, like a header
//	...
//	limiter, err := core.New(st, "rpc", apiKey, []store.Limit{store.PerMinute(100)})
//	...
//	srv := grpc.NewServer(
//		grpc.ChainUnaryInterceptor(grpclimit.UnaryServerInterceptor(limiter)),
//		grpc.ChainStreamInterceptor(grpclimit.StreamServerInterceptor(limiter)))
//
// The Limiter decides on the HTTP request each call stands for (gRPC runs
// on HTTP/2): method POST, URL path and Request.Pattern the full method
// ("/pkg.Service/Method"), the incoming metadata as header fields (its
// keys in canonical form, so keyfuncs.Header("x-api-key") and
// keyfuncs.JWT read them), the peer's address as RemoteAddr, :authority
// as Host. So the Limiter's key function keys calls by metadata
// (keyfuncs.Header, keyfuncs.JWT), by peer address (keyfuncs.IP, with
// your trusted proxies) or by method (keyfuncs.Route), and its plan, cost
// and skip functions, its failure policy and observers work as for HTTP;
// an HTTP and a gRPC server may share one Limiter. A stream is decided
// once, when it opens, at the cost of one call.
//
// A call the Limiter refuses is answered with a status error:
// codes.ResourceExhausted over a limit, with a google.rpc.RetryInfo
// detail holding the delay after which it may pass; codes.Unavailable
// when the store cannot decide under core.FailClosed; codes.PermissionDenied
// without a key under core.KeyErrorDeny; the context's error when the
// client has gone. A LeakyBucket delay holds the call, then serves it.
// core.WithRefusal, which writes HTTP bodies, is not used.
//
// The rate-limit fields the Limiter's header style selects
// (core.WithHeaders) are sent as trailing metadata, in lower case,
// whatever the outcome: x-ratelimit-limit, x-ratelimit-remaining,
// x-ratelimit-reset, retry-after, ratelimit-policy and ratelimit. With
// several Limiters chained on a server, the trailers are the binding
// Decision's (see core.Decision.Stack), and the handler's context gives
// it to core.FromContext.
//
// When the Limiter needs to hear how a call ended (core.WithCountIf,
// MaxInFlight limits), the interceptors call core.Decision.Done with the
// HTTP status of the call's code, as google.rpc.Code maps them (OK 200,
// InvalidArgument 400, Unauthenticated 401, PermissionDenied 403, NotFound
// 404, ResourceExhausted 429, Unavailable 503, ...; a panic 500), so that
// WithCountIf(func(s int) bool { return s >= 400 }) counts failed calls.
//
// This package is a module of its own (github.com/sluicehq/sluice/grpclimit),
// so that users of sluice's HTTP adapters do not build gRPC.
package grpclimit
