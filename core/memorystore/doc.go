// Package memorystore is a store.Store that keeps rate-limit state in the
// memory of the process: New returns one, sharded and bounded
// (WithMaxKeys), deciding every algorithm with the integer arithmetic of
// ALGORITHMS.md that the Redis store uses too. It suits a single process,
// tests (WithClock), and the local fallback of the Redis store while Redis
// is away (redisstore.WithFallback), which is its default there. It runs no
// goroutine and needs no Close.
package memorystore
