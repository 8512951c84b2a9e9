// Package store holds what sluice's Limiter (package core) and the stores
// that keep rate-limit state share: the Limit a user writes (PerMinute,
// MaxInFlight, PerCalendar, ParseLimit, the Algorithms), the Spec a store receives (a
// Limit validated once, in integer microseconds), the Result of a decision,
// the errors, and the Store interface.
//
// Users write limits with this package and pass them to core.New. Store
// authors implement Store, every method of it (one they cannot serve fails
// with an error wrapping errors.ErrUnsupported), and run core/storetest's
// conformance suite against it; the memory store (core/memorystore) and the
// Redis store (core/redisstore) implement it. A store that decides locally
// when its backend fails says so in Result.Fallback.
//
// store imports only the standard library.
package store
