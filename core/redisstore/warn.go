package redisstore

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// The kinds of what the Store warns of (slog attribute "kind", and the
// keys of store.Stats.Warnings).
const (
	// warnEviction: Redis has a maxmemory and a maxmemory-policy other
	// than noeviction, so it may evict the Store's keys (every one has a
	// TTL, so volatile-* policies evict them too), forgetting what clients
	// were charged: requests it should refuse are then admitted.
	warnEviction = "eviction"
	// warnEvicted: Redis evicted keys (evicted_keys grew) since the last
	// look: some of them may have been rate-limit state.
	warnEvicted = "evicted"
	// warnRestart: the server's run_id changed since the Store last
	// looked: it restarted (or another server took its address), and
	// without persistence (AOF) every count and penalty it held is gone.
	warnRestart = "restart"
	// warnUnchecked: the Redis user may not run INFO, so none of the
	// above can be checked.
	warnUnchecked = "unchecked"
	// warnFleet: the Store cannot count the processes sharing Redis
	// (PUBSUB NUMSUB refused): each one's fallback may admit a whole
	// allowance while Redis is away.
	warnFleet = "fleet"
	// warnAuth: Redis refused the Store's user (a wrong password, a
	// missing permission): every decision goes to the fallback.
	warnAuth = "permission"
)

// warn logs what the Store found (with slog.Default(), at level Warn) and
// counts it by kind for Stats. addr is the server, "" for the whole client.
func (s *Store) warn(kind, addr, msg string) {
	s.warnings.add(kind)
	attrs := []any{"kind", kind}
	if addr != "" {
		attrs = append(attrs, "server", addr)
	}
	s.logger().Warn("redisstore: "+msg, attrs...)
}

// logger returns the Store's logger: slog.Default(), or the tests'.
func (s *Store) logger() *slog.Logger {
	if s.log != nil {
		return s.log
	}
	return slog.Default()
}

// inspect reads INFO on client (each master of a Cluster) and warns of an
// eviction policy, of keys evicted since the last look, and of a run_id
// that changed. An error (INFO not permitted, a server down) is left
// unreported: the caller's own calls meet it.
func (s *Store) inspect(ctx context.Context, client redis.UniversalClient) {
	_ = forEachServer(ctx, client, func(ctx context.Context, c *redis.Client) error {
		text, err := c.Info(ctx, "server", "memory", "stats").Result()
		if err != nil {
			return nil
		}
		addr := c.Options().Addr
		if n, err := strconv.ParseInt(infoField(text, "evicted_keys"), 10, 64); err == nil {
			if old, seen := s.evicted.Swap(addr, n); seen && n > old.(int64) {
				s.warn(warnEvicted, addr, fmt.Sprintf("Redis evicted %d keys since the last look: rate-limit "+
					"state among them is forgotten, admitting requests that should be refused", n-old.(int64)))
			}
		}
		if id := infoField(text, "run_id"); id != "" {
			if old, seen := s.runIDs.Swap(addr, id); seen && old != id {
				s.warn(warnRestart, addr, fmt.Sprintf(
					"Redis restarted (run_id %s, was %s): state it did not persist is lost", id, old))
			}
		}
		policy, maxmem := infoField(text, "maxmemory_policy"), infoField(text, "maxmemory")
		evicts := policy != "" && policy != "noeviction" && maxmem != "" && maxmem != "0"
		if was, _ := s.evictionPolicy.Swap(addr, evicts); evicts && was != true { // once per server and policy change
			s.warn(warnEviction, addr, fmt.Sprintf(
				"maxmemory-policy %s with maxmemory %s bytes may evict rate-limit state, admitting "+
					"requests that should be refused: use noeviction, or a Redis of its own", policy, maxmem))
		}
		return nil
	})
}

// inspectSoon runs inspect in the background, one at a time: for events
// that may follow a restart (lost scripts, a subscription back).
func (s *Store) inspectSoon() {
	if !s.inspecting.CompareAndSwap(false, true) {
		return
	}
	s.inspections.Add(1)
	go func() {
		defer s.inspections.Done()
		defer s.inspecting.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
		defer cancel()
		s.inspect(ctx, s.client)
	}()
}

// infoField returns the value of name in INFO's text, "" if absent.
func infoField(info, name string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// counts counts events by kind; safe for concurrent use.
type counts struct {
	mu sync.Mutex
	m  map[string]int64
}

func (c *counts) add(kind string) {
	c.mu.Lock()
	if c.m == nil {
		c.m = map[string]int64{}
	}
	c.m[kind]++
	c.mu.Unlock()
}

// snapshot returns a copy of the counts.
func (c *counts) snapshot() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int64, len(c.m))
	for k, v := range c.m {
		out[k] = v
	}
	return out
}
