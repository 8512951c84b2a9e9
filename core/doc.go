// Package core holds sluice's framework-agnostic rate-limiting decisions:
// the Limit type and its algorithms, the store.Store interface with an in-memory
// implementation, and the Limiter that HTTP adapters call once per request.
//
// core imports only the standard library. The Redis store lives in
// core/redisstore; the key functions in keyfuncs; the HTTP adapters in
// nethttp, ginlimit and echolimit.
package core
