package redisstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/core/store"
)

// Default circuit-breaker settings (see WithBreaker).
const (
	DefaultBreakerFailures = 5
	DefaultBreakerCooldown = time.Second
)

// probeTimeout bounds one probe of a server whose breaker is open.
const probeTimeout = time.Second

// WithBreaker configures the Store's circuit breakers: one per Redis
// server (each master of a Cluster; the whole client for other kinds),
// shared by every Limiter on the Store. A server's breaker opens after
// failures consecutive failed calls, or at once on a call that ran out of
// time (its caller had already waited the whole per-decision timeout).
// While it is open, Takes and Peeks of keys on that server fail at once
// with an error wrapping store.ErrBreakerOpen, so the Limiters' failure
// policy decides without waiting; keys on other Cluster masters are not
// affected.
//
// An open breaker is probed in the background every cooldown, with or
// without traffic: a PING, then the Store's scripts are loaded, and the
// breaker closes. Takes that arrive once Redis has answered the PING wait
// (within their context) for the scripts and then go to Redis, so a
// service is exact again within a cooldown of Redis answering, and no
// burst of requests is decided locally meanwhile. While the PING itself is
// unanswered they fail at once: waiting on a server that may be frozen
// would cost each of them its whole timeout.
//
// A call whose caller went away (context canceled) says nothing about
// Redis and is not counted. failures 0 turns the breakers off: every call
// goes to Redis. The defaults are DefaultBreakerFailures and
// DefaultBreakerCooldown; failures must be 0 to 2^30 and cooldown, when
// failures > 0, 1ms to 1h.
func WithBreaker(failures int, cooldown time.Duration) Option {
	return optionFunc(func(s *settings) { s.failures, s.cooldown = failures, cooldown })
}

func checkBreaker(failures int, cooldown time.Duration) error {
	switch {
	case failures < 0 || failures > 1<<30:
		return fmt.Errorf("redisstore: WithBreaker(%d, %v): failures out of range [0, 2^30]", failures, cooldown)
	case failures > 0 && (cooldown < time.Millisecond || cooldown > time.Hour):
		return fmt.Errorf("redisstore: WithBreaker(%d, %v): cooldown out of range [1ms, 1h]", failures, cooldown)
	}
	return nil
}

// health holds the breakers of a Store's servers.
type health struct {
	threshold int32 // 0: off
	cooldown  time.Duration
	load      func(context.Context, redis.Scripter) error // the Store's scripts
	reload    func()                                      // a Cluster's slot map; nil otherwise
	pipe      func() *batcher                             // a node's batcher; nil: no pipelining

	cluster *redis.ClusterClient // nil: one server
	whole   *node                // the only server, or a Cluster whose map is unknown
	nodes   sync.Map             // master address -> *node (Cluster)

	stop    chan struct{} // closed by Close: probes end
	probes  sync.WaitGroup
	stopped sync.Once
}

func newHealth(client redis.UniversalClient, failures int, cooldown time.Duration, load func(context.Context, redis.Scripter) error, pipe func() *batcher) *health {
	h := &health{threshold: int32(failures), cooldown: cooldown, load: load, pipe: pipe, stop: make(chan struct{})}
	h.whole = h.newNode("", client)
	if cc, ok := client.(*redis.ClusterClient); ok {
		h.cluster = cc
	}
	return h
}

// node is the breaker of one server, and the queue of its Takes waiting
// for a shared round trip: a server that stalls holds up only its own.
type node struct {
	h      *health
	client redis.UniversalClient // what a probe calls
	open   error                 // returned while open
	pipe   *batcher              // nil: no pipelining

	state    atomic.Int32 // stateClosed, stateOpen, stateLoading
	failures atomic.Int32 // consecutive, while closed
	mu       sync.Mutex
	loaded   chan struct{} // closed when a probe's script load ends; under mu
}

const (
	stateClosed  = iota
	stateOpen    // calls fail at once; a probe runs every cooldown
	stateLoading // a probe reached Redis and loads the scripts: calls wait
)

func (h *health) newNode(addr string, client redis.UniversalClient) *node {
	what := "redis"
	if addr != "" {
		what = "redis " + addr
	}
	n := &node{h: h, client: client, open: fmt.Errorf("%s: %w", what, store.ErrBreakerOpen)}
	if h.pipe != nil {
		n.pipe = h.pipe()
	}
	return n
}

// nodeFor returns the breaker of the server that holds key.
func (h *health) nodeFor(ctx context.Context, key string) *node {
	if h.cluster == nil {
		return h.whole
	}
	c, err := h.cluster.MasterForKey(ctx, key)
	if err != nil {
		return h.whole // no slot map: the Cluster as a whole
	}
	addr := c.Options().Addr
	if n, ok := h.nodes.Load(addr); ok {
		return n.(*node)
	}
	n, _ := h.nodes.LoadOrStore(addr, h.newNode(addr, c))
	return n.(*node)
}

// each calls f with every node known.
func (h *health) each(f func(*node)) {
	f(h.whole)
	h.nodes.Range(func(_, n any) bool {
		f(n.(*node))
		return true
	})
}

// admit returns nil when a call may go to the server now, the breaker's
// error when it is open, and the context's error when ctx ends while the
// scripts are being loaded.
func (n *node) admit(ctx context.Context) error {
	switch n.state.Load() {
	case stateClosed:
		return nil
	case stateLoading:
		n.mu.Lock()
		loaded := n.loaded
		n.mu.Unlock()
		if loaded != nil {
			select {
			case <-loaded:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if n.state.Load() == stateClosed {
			return nil
		}
	}
	return n.open
}

// report records how a call that admit let through ended.
func (n *node) report(ctx context.Context, err error) {
	switch {
	case n.h.threshold == 0:
	case err == nil:
		if n.failures.Load() != 0 {
			n.failures.Store(0)
		}
	case ctx.Err() == context.Canceled:
		// The caller went away: nothing learnt about Redis.
	case timedOut(ctx, err):
		n.trip()
	case n.failures.Add(1) >= n.h.threshold:
		n.trip()
	}
}

// timedOut reports whether err ended a call because time ran out.
func timedOut(ctx context.Context, err error) bool {
	var ne net.Error
	return ctx.Err() == context.DeadlineExceeded || errors.Is(err, context.DeadlineExceeded) ||
		errors.As(err, &ne) && ne.Timeout()
}

// trip opens a closed breaker and starts its probes.
func (n *node) trip() {
	if !n.state.CompareAndSwap(stateClosed, stateOpen) {
		return
	}
	n.failures.Store(0)
	n.h.probes.Add(1)
	go n.probeUntilClosed()
}

func (n *node) probeUntilClosed() {
	defer n.h.probes.Done()
	t := time.NewTimer(n.h.cooldown)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-n.h.stop:
			return
		}
		if n.probe() {
			return
		}
		t.Reset(n.h.cooldown)
	}
}

// probe pings the server and, when it answers, loads the scripts while
// new calls wait, then closes the breaker. It reports whether it did.
func (n *node) probe() bool {
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	if err := n.client.Ping(ctx).Err(); err != nil {
		if n.h.reload != nil {
			n.h.reload() // a replica may have taken over the slots
		}
		return false
	}
	n.mu.Lock()
	n.loaded = make(chan struct{})
	n.state.Store(stateLoading)
	n.mu.Unlock()
	err := n.h.load(ctx, n.client)
	n.mu.Lock()
	if err == nil {
		n.state.Store(stateClosed)
	} else {
		n.state.Store(stateOpen)
	}
	close(n.loaded)
	n.loaded = nil
	n.mu.Unlock()
	return err == nil
}

// close ends the probes and waits for them.
func (h *health) close() {
	h.stopped.Do(func() { close(h.stop) })
	h.probes.Wait()
}
