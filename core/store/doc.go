// Package store is the contract between sluice's Limiter (package core)
// and the stores that keep rate-limit state: the Limit a user writes, the
// Spec a store receives (a Limit validated once, in integer microseconds),
// the Algorithms, the Result of a Take, and the Store interface with its
// optional Peeker, Resetter and ResetNotifier.
//
// Users of the Limiter need only package core, which re-exports Limit,
// Algorithm and Result. This package is for store authors: implement
// Store, and run core/storetest's conformance suite against it. The
// memory store (core/memorystore) and the Redis store (core/redisstore)
// implement it.
//
// store imports only the standard library.
package store
