package redisstore

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Kinds of Warning.
const (
	// WarningEviction: Redis has a maxmemory and a maxmemory-policy other
	// than noeviction, so it may evict the Store's keys (every one has a
	// TTL, so volatile-* policies evict them too), forgetting what clients
	// were charged: requests it should refuse are then admitted.
	WarningEviction = "eviction"
	// WarningRestart: the server's run_id changed since the Store last
	// looked: it restarted (or another server took its address), and
	// without persistence (AOF) every count and penalty it held is gone.
	WarningRestart = "restart"
	// WarningUnchecked: the Redis user may not run INFO, so neither of the
	// above can be checked.
	WarningUnchecked = "unchecked"
)

// Warning is something a Store found that can make Redis lose rate-limit
// state, and so admit requests it should refuse (see WithWarnings).
type Warning struct {
	Kind string // WarningEviction, WarningRestart or WarningUnchecked
	Addr string // the server ("host:port"); "" for the whole client
	Msg  string // what was found, for a log
}

// String returns the warning as a log line.
func (w Warning) String() string {
	if w.Addr == "" {
		return "redisstore: " + w.Msg
	}
	return "redisstore: " + w.Addr + ": " + w.Msg
}

// WithWarnings sets the function told of each Warning: by Ping, by a
// probe that closes a circuit breaker, when the reset subscription comes
// back, and when Redis has lost the scripts (the checks then run in the
// background). Eviction is reported at every check that finds it, a
// restart once. f must be safe for concurrent use and return promptly.
// nil, the default, logs each warning with slog.Default at level Warn. To
// count them too, call promlimit.Collector.StoreWarning or
// otellimit.Recorder.StoreWarning with each Kind.
func WithWarnings(f func(Warning)) Option {
	return optionFunc(func(s *settings) { s.warn = f })
}

// warn reports w.
func (s *Store) warn(w Warning) {
	if s.warnf != nil {
		s.warnf(w)
		return
	}
	slog.Default().Warn(w.String(), "kind", w.Kind)
}

// inspect reads INFO on client (each master of a Cluster) and warns of an
// eviction policy and of a run_id that changed since the last look. An
// error (INFO not permitted, a server down) is left unreported: the
// caller's own calls meet it.
func (s *Store) inspect(ctx context.Context, client redis.UniversalClient) {
	_ = forEachServer(ctx, client, func(ctx context.Context, c *redis.Client) error {
		text, err := c.Info(ctx, "server", "memory").Result()
		if err != nil {
			return nil
		}
		addr := c.Options().Addr
		if id := infoField(text, "run_id"); id != "" {
			if old, seen := s.runIDs.Swap(addr, id); seen && old != id {
				s.warn(Warning{Kind: WarningRestart, Addr: addr, Msg: fmt.Sprintf(
					"Redis restarted (run_id %s, was %s): state it did not persist is lost", id, old)})
			}
		}
		policy, maxmem := infoField(text, "maxmemory_policy"), infoField(text, "maxmemory")
		if policy != "" && policy != "noeviction" && maxmem != "" && maxmem != "0" {
			s.warn(Warning{Kind: WarningEviction, Addr: addr, Msg: fmt.Sprintf(
				"maxmemory-policy %s with maxmemory %s bytes may evict rate-limit state, admitting "+
					"requests that should be refused: use noeviction, or a Redis of its own", policy, maxmem)})
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
