// Package store holds what sluice's Limiter (package core) and the stores
// that keep rate-limit state share: the Limit a user writes (PerMinute,
// ParseLimit, the Algorithms), the Spec a store receives (a Limit
// validated once, in integer microseconds), the Result of a decision, and
// the Store interface.
//
// Users write limits with this package and pass them to core.New. Store
// authors implement Store and run core/storetest's conformance suite
// against it; the memory store (core/memorystore) and the Redis store
// (core/redisstore) implement it.
//
// store imports only the standard library.
package store
