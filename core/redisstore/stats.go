package redisstore

import (
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/core/store"
)

// Stats returns the Store's health, for metrics (promlimit.WithStoreStats,
// otellimit.WithStoreStats): the processes it counts on Redis, each
// server's circuit breaker, what the fallback still owes Redis, and the
// warnings logged so far by kind. It is safe for concurrent use.
func (s *Store) Stats() store.Stats {
	if s == nil || s.front == nil {
		return store.Stats{}
	}
	st := store.Stats{Instances: s.instanceCount(), Breakers: s.health.breakers(), Warnings: s.warnings.snapshot()}
	st.Debts, st.OldestDebt = s.front.Debts()
	return st
}

// serverAddr returns the address of a node's client, "redis" for a client
// of several.
func serverAddr(c redis.UniversalClient) string {
	if cl, ok := c.(*redis.Client); ok {
		return cl.Options().Addr
	}
	return "redis"
}
