package redisstore

import (
	"context"
	"sync/atomic"
)

// clusterReloadEvery is the least time between two slot-map reloads that
// failed Takes ask for.
const clusterReloadEvery = 200_000 // µs

// clusterReload asks a ClusterClient to reload its slot map when a Take
// fails. After a master dies and its replica is promoted, go-redis keeps
// sending that master's slots to the dead address until its own periodic
// reload (about 10 s in the e2e failover test); a reload on the first
// failures brings decisions back from the promoted replica within about a
// second. ReloadState only schedules a background reload (go-redis merges
// concurrent ones), and kick calls it at most once per clusterReloadEvery,
// so a flood of failures costs a few atomic loads each.
type clusterReload struct {
	reload func(context.Context)
	last   atomic.Int64 // µs on the Store's clock; 0: never
}

// kick schedules a reload unless one was scheduled in the last
// clusterReloadEvery. now is the Store's monotonic clock in µs.
func (c *clusterReload) kick(now int64) {
	last := c.last.Load()
	if last != 0 && now-last < clusterReloadEvery {
		return
	}
	if c.last.CompareAndSwap(last, now) {
		c.reload(context.Background())
	}
}
