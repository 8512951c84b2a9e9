package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/core/store"
)

// Default circuit-breaker settings (see WithBreaker).
const (
	defaultBreakerFailures = 5
	defaultBreakerCooldown = time.Second
)

// probeTimeout is the least time a probe of a server whose breaker is open
// waits for it (see WithBreaker).
const probeTimeout = time.Second

// WithBreaker configures the Store's circuit breakers: one per Redis
// server (each master of a Cluster; the whole client for other kinds),
// shared by every Limiter on the Store. While a server's breaker is open,
// Takes, Charges, Peeks, Refunds and Releases of its keys fail at once
// with an error wrapping store.ErrBreakerOpen: the fallback decides a Take,
// Charge or Peek (WithFallback); otherwise the error reaches the caller (a
// core.Limiter then follows its failure policy).
//
// A breaker opens on evidence that the server fails, not on one slow call:
//   - at once when a connection to it is refused (go-redis' default dial
//     retries report a refusal as a timeout; UniversalOptions turns them off);
//   - after failures consecutive error replies, an answered call resetting
//     the count;
//   - after failures consecutive calls that ran out of time while the
//     server answered nothing, one of them made after the first was
//     reported, each sent with at least half of its time left and noticed
//     within 5 ms (or a fifth of its time) of its deadline (so that a
//     process short of CPU does not blame the server for its own delays).
//
// A connection lost under a call (EOF, reset) counts for nothing: under
// churn (connections killed while the server answers) a fresh one
// replaces it at once, and a server that is gone refuses the next one.
//
// Not counted: a timeout while the server answers other calls, a call that
// timed out in the Store's queue unsent, a call whose caller went away.
// An open breaker is probed every cooldown by a PING and a script call
// (CLIENT PAUSE WRITE answers PING but holds scripts), within max(cooldown,
// 1s); once the script runs, the probe loads the scripts and closes the
// breaker. failures 0 turns the breakers off. The defaults are 5 failures
// and a cooldown of 1 s; failures must be 0 to 2^30 and cooldown, when
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
	check     func(context.Context, redis.UniversalClient) error // a probe's test of a server
	load      func(context.Context, redis.Scripter) error        // the Store's scripts
	reload    func()                                             // a Cluster's slot map; nil otherwise
	closed    func(context.Context, redis.UniversalClient)       // after a probe closed a breaker; may be nil
	opened    func(addr string)                                  // after a breaker opened; may be nil
	pipe      func(redis.UniversalClient) *batcher               // a node's batcher; nil: no pipelining

	cluster *redis.ClusterClient // nil: one server
	whole   *node                // the only server, or a Cluster whose map is unknown
	nodes   sync.Map             // master address -> *node (Cluster)

	stop    chan struct{} // closed by Close: probes end
	probes  sync.WaitGroup
	stopped sync.Once
}

func newHealth(client redis.UniversalClient, failures int, cooldown time.Duration, pipe func(redis.UniversalClient) *batcher) *health {
	h := &health{threshold: int32(failures), cooldown: cooldown, check: checkServer, load: loadScripts,
		pipe: pipe, stop: make(chan struct{})}
	h.whole = h.newNode("", client)
	if c, ok := client.(*redis.Client); ok {
		h.whole.addr = c.Options().Addr
	}
	if cc, ok := client.(*redis.ClusterClient); ok {
		h.cluster = cc
	}
	return h
}

// node is the breaker of one server, and the queue of its Takes waiting
// for a shared round trip: a server that stalls holds up only its own.
type node struct {
	h       *health
	client  redis.UniversalClient // what a probe calls
	openErr error                 // returned while open
	pipe    *batcher              // nil: no pipelining

	isOpen   atomic.Bool  // the breaker is open: calls fail at once
	openedAt atomic.Int64 // when it opened (monoMicros)
	addr     string       // the server's address, "" for the whole client
	failures atomic.Int32 // consecutive counted failures, while closed
	streak   atomic.Int64 // when the first of them was reported (monoMicros); noStreak: none
	answered atomic.Int64 // when the server last answered a call (monoMicros), to answerGrain
	// recordUntil: charges are recorded until then (monoMicros; record.go)
	recordUntil atomic.Int64
}

// answerGrain is how long node.answered may lag (µs): a store per answered
// call on one shared word would cost every Take a contended write.
const answerGrain = 1000

// notSent is the send time of a call that never left the Store's queue.
const notSent = -1

// noStreak is node.streak when no failure is counted.
const noStreak = math.MaxInt64

func (h *health) newNode(addr string, client redis.UniversalClient) *node {
	what := "redis"
	if addr != "" {
		what = "redis " + addr
	}
	n := &node{h: h, client: client, addr: addr, openErr: fmt.Errorf("%s: %w", what, store.ErrBreakerOpen)}
	n.answered.Store(math.MinInt64)
	n.streak.Store(noStreak)
	if h.pipe != nil {
		n.pipe = h.pipe(client)
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

// anyOpen reports whether a breaker is open.
func (h *health) anyOpen() bool {
	open := false
	h.each(func(n *node) { open = open || n.isOpen.Load() })
	return open
}

// openLongest returns the server whose breaker has been open the longest,
// and for how long (0 when none is open).
func (h *health) openLongest() (addr string, open time.Duration) {
	now := monoMicros()
	h.each(func(n *node) {
		if d := time.Duration(now-n.openedAt.Load()) * time.Microsecond; n.isOpen.Load() && d > open {
			addr, open = n.addr, d
		}
	})
	if addr == "" && open > 0 {
		addr = "redis"
	}
	return addr, open
}

// breakers returns, for each server known, whether its breaker is open.
func (h *health) breakers() map[string]bool {
	out := map[string]bool{}
	h.each(func(n *node) {
		addr := n.addr
		if addr == "" {
			if h.cluster != nil && !n.isOpen.Load() {
				return // the whole Cluster, before its slot map is known
			}
			addr = "redis"
		}
		out[addr] = n.isOpen.Load()
	})
	return out
}

// each calls f with every node known.
func (h *health) each(f func(*node)) {
	f(h.whole)
	h.nodes.Range(func(_, n any) bool {
		f(n.(*node))
		return true
	})
}

// admit returns nil when a call may go to the server now, and the
// breaker's error when it is open.
func (n *node) admit(context.Context) error {
	if n.isOpen.Load() {
		return n.openErr
	}
	return nil
}

// report records how a call that admit let through ended: start is when
// it was made and sent when it was handed to the client (monoMicros), or
// notSent when its deadline ran out in the Store's queue. See WithBreaker
// for the rule. Under steady traffic a frozen server opens the breaker
// about two timeouts after it froze, each request waiting at most its own
// timeout; a failure ratio over a time window (Hystrix, Envoy) would keep
// it closed longer, as the calls answered before the freeze stay in the
// window. A lost connection opens nothing: the next call dials, which is
// refused if the server is gone.
func (n *node) report(ctx context.Context, err error, start, sent int64) {
	switch {
	case n.h.threshold == 0:
	case err == nil:
		n.answer()
	case !isServerFailure(err):
		// MOVED, ASK, TRYAGAIN: a slot moving, not a failing server.
	case sent == notSent || ctx.Err() == context.Canceled:
		// Never sent, or the caller went away: nothing learnt about Redis.
	case refused(err):
		n.trip()
	case isReply(err): // the server answered, with an error
		n.streak.CompareAndSwap(noStreak, monoMicros())
		if n.failures.Add(1) >= n.h.threshold {
			n.trip()
		}
	case !timedOut(ctx, err):
		// A connection lost under the call (EOF, reset): nothing learnt.
		// Connections killed under load (churn) are replaced at once; a
		// server gone refuses the next connection, which opens the
		// breaker (refused).
	case n.unanswered(start) && fairTry(ctx, start, sent):
		// Its time run out while the server answered no other call:
		// counted, but it opens the breaker only when a call made after
		// the first of the streak timed out too (this process ran
		// meanwhile).
		n.streak.CompareAndSwap(noStreak, monoMicros())
		if n.failures.Add(1) >= n.h.threshold && start > n.streak.Load() {
			n.trip()
		}
	}
}

// isReply reports whether err is an error reply of the server (not a
// connection or a deadline failing).
func isReply(err error) bool {
	var reply redis.Error
	return errors.As(err, &reply)
}

// answer records that the server answered a call.
func (n *node) answer() {
	if n.failures.Load() != 0 {
		n.failures.Store(0)
		n.streak.Store(noStreak)
	}
	if now, a := monoMicros(), n.answered.Load(); now-answerGrain >= a {
		n.answered.CompareAndSwap(a, now) // lost: another call moved it
	}
}

// unanswered reports whether a call made at start that timed out tells
// that the server stopped answering: the server answered no call since.
func (n *node) unanswered(start int64) bool {
	return n.answered.Load() < start
}

// fairTry reports whether a call made at start, sent at sent, that ran
// out of time gave the server a fair try: it was sent with at least half
// of its time left, and its end is noticed soon after its deadline. A
// call that waited for this process (CPU starvation, a long GC pause)
// before it was sent, or whose timeout fired late, tells of this process,
// not of the server. A call without a deadline counts.
func fairTry(ctx context.Context, start, sent int64) bool {
	dl, ok := ctx.Deadline()
	if !ok {
		return true
	}
	now := monoMicros()
	untilDeadline := time.Until(dl).Microseconds() // negative: past it
	total := now - start + untilDeadline           // the call's time
	left := now - sent + untilDeadline             // of it, left when sent
	late := -untilDeadline
	return 2*left >= total && late <= max(lateGrace, total/5)
}

// lateGrace is how late after its deadline a timed-out call may be noticed
// and still count against the server (µs); a fifth of the call's time when
// that is more. A process that runs keeps it well under a millisecond.
const lateGrace = 5000

// isServerFailure reports whether err, a call's error, says anything
// against the server: MOVED, ASK and TRYAGAIN do not (a Cluster moving a
// slot answers them at once, and the call did not run).
func isServerFailure(err error) bool {
	r, _ := redirectOf(err)
	return r == notRedirected
}

// timedOut reports whether err ended a call because time ran out.
func timedOut(ctx context.Context, err error) bool {
	var ne net.Error
	return ctx.Err() == context.DeadlineExceeded || errors.Is(err, context.DeadlineExceeded) ||
		errors.As(err, &ne) && ne.Timeout()
}

// refused reports whether err says the server refused a connection: a
// dial that failed other than by timing out.
func refused(err error) bool {
	var op *net.OpError
	return errors.Is(err, syscall.ECONNREFUSED) || errors.As(err, &op) && op.Op == "dial" && !op.Timeout()
}

// trip opens a closed breaker and starts its probes.
func (n *node) trip() {
	if !n.isOpen.CompareAndSwap(false, true) {
		return
	}
	n.openedAt.Store(monoMicros())
	if n.h.opened != nil {
		n.h.opened(n.addr)
	}
	n.h.probes.Add(1)
	go n.probeUntilClosed()
}

// probeUntilClosed probes the server every cooldown (at once after a probe
// that took longer) until one closes the breaker or the Store is closed.
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
		start := time.Now()
		if n.probe() {
			return
		}
		t.Reset(max(0, n.h.cooldown-time.Since(start)))
	}
}

// probe checks the server and, when it answers, loads the scripts (an
// error is left for the Takes' EVAL fallback) and closes the breaker. It
// reports whether it did.
func (n *node) probe() bool {
	ctx, cancel := context.WithTimeout(context.Background(), max(n.h.cooldown, probeTimeout))
	defer cancel()
	if err := n.h.check(ctx, n.client); err != nil {
		if n.h.reload != nil {
			n.h.reload() // a replica may have taken over the slots
		}
		return false
	}
	_ = n.h.load(ctx, n.client)
	n.failures.Store(0)
	n.streak.Store(noStreak)
	n.isOpen.Store(false)
	if n.h.closed != nil {
		n.h.closed(ctx, n.client)
	}
	return true
}

// checkServer is a probe's test of a server: a PING, then a script call,
// which Redis runs only when it would run a Take's (CLIENT PAUSE WRITE
// answers PING but holds scripts). The script is sent by EVALSHA, and by
// EVAL when Redis does not have it, so that no SCRIPT LOAD is needed.
func checkServer(ctx context.Context, c redis.UniversalClient) error {
	if err := c.Ping(ctx).Err(); err != nil {
		return err
	}
	return probeScript.Run(ctx, c, nil).Err()
}

// probeScript is what a probe runs: nothing, as a script that may write.
var probeScript = redis.NewScript("return 1")

// close ends the probes and waits for them.
func (h *health) close() {
	h.stopped.Do(func() { close(h.stop) })
	h.probes.Wait()
}
