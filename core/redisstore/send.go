package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// once is the cost argument of a charging script call: go-redis writes it
// as the cost the first time it sends the command and as resentArg every
// later time, and the scripts refuse resentArg without reading or writing
// anything. A call the client library sends again by itself (go-redis
// retries a broken connection or a timeout MaxRetries times, a
// ClusterClient up to MaxRedirects times whatever MaxRetries says, and a
// pipeline whole, answered commands included) may have run the first time,
// so it is refused rather than charged twice; the caller gets an error, as
// it would without the retry. go-redis asks a command's arguments for
// their bytes (MarshalBinary) each time it writes them, and nowhere else.
//
// Calls that are known not to have run (NOSCRIPT, MOVED, ASK, TRYAGAIN) are
// sent again by the Store itself, with a new once (fresh).
//
// This was chosen over making a replayed call return a recorded result:
// recording each call's result under its own key with a short TTL, so that
// a replay finds it, took the lean GCRA script from 9.7 to 18.1 µs of Redis
// time per call (INFO commandstats, 8 connections, pipelines of 16, on a
// shared machine at load 15: the ratio is what counts), and the records'
// memory grows with the decision rate times the TTL; the mark costs one
// comparison in the script (no change measurable) and no Redis memory.
type once struct {
	arg  []byte
	sent atomic.Bool
}

var (
	resentBytes = []byte(resentArg)
	costOne     = []byte("1")
)

// MarshalBinary returns the cost the first time, resentArg after.
func (o *once) MarshalBinary() ([]byte, error) {
	if o.sent.Swap(true) {
		return resentBytes, nil
	}
	return o.arg, nil
}

// String is the cost, for hooks that log commands.
func (o *once) String() string { return string(o.arg) }

// chargeArg is the cost argument of a script call of n: a once for a
// charge (n > 0), the plain figure for a peek or a dry run, which writes
// nothing and may run twice.
func chargeArg(n int64) any {
	n = costArg(n)
	switch {
	case n <= 0:
		return n
	case n == 1:
		return &once{arg: costOne}
	}
	return &once{arg: strconv.AppendInt(nil, n, 10)}
}

// fresh returns a copy of cmd, a call that did not run, to be sent again:
// its once, if any, not yet written.
func fresh(cmd []any) []any {
	c := append([]any(nil), cmd...)
	for i, a := range c {
		if o, ok := a.(*once); ok {
			c[i] = &once{arg: o.arg}
		}
	}
	return c
}

// redirect is what a Redis Cluster node's error reply says of a call that
// it did not run.
type redirect int

const (
	notRedirected    redirect = iota
	redirectMoved             // MOVED: the slot lives on another master now
	redirectAsk               // ASK: the slot is migrating; ask the target
	redirectTryAgain          // TRYAGAIN: the call's keys are split by a migration
)

// redirectOf classifies err, and returns the address a MOVED or ASK names.
func redirectOf(err error) (redirect, string) {
	if err == nil {
		return notRedirected, "" // before re, which escapes: no allocation on the common path
	}
	var re redis.Error
	if !errors.As(err, &re) {
		return notRedirected, ""
	}
	msg := re.Error()
	switch {
	case strings.HasPrefix(msg, "MOVED "), strings.HasPrefix(msg, "ASK "):
		f := strings.Fields(msg)
		if len(f) != 3 {
			return notRedirected, ""
		}
		if f[0] == "ASK" {
			return redirectAsk, f[2]
		}
		return redirectMoved, f[2]
	case strings.HasPrefix(msg, "TRYAGAIN"):
		return redirectTryAgain, ""
	}
	return notRedirected, ""
}

// maxRedirects bounds the MOVED, ASK and TRYAGAIN replies one call
// follows (its context bounds the time).
const maxRedirects = 32

// tryAgainPause is the longest pause before a call that met TRYAGAIN is
// sent again; the first is 1 ms, doubling.
const tryAgainPause = 8 * time.Millisecond

// send runs cmd, an EVALSHA of sc whose first key is key, on the server of
// first and returns its reply and the server that gave it. On a Cluster it
// follows MOVED and ASK to the master they name (a MOVED that follows
// another redirect after a pause, as for TRYAGAIN) and sends a call that met
// TRYAGAIN again after a pause (1 ms, doubling up to 8 ms), within ctx: the
// call did not run, so it is sent again with a new once; or, when
// splittable (the caller can decide it otherwise: one key at a time, or
// unrecorded), returns TRYAGAIN at once. It never sends again a call that may have run. sent
// is when the last sending was handed to the client (monoMicros), or
// notSent (see node.report).
func (s *Store) send(ctx context.Context, first *node, key string, sc *script, cmd []any, splittable bool) (reply any, n *node, sent int64, err error) {
	n = first
	ask := false
	var tryAgain error // the last TRYAGAIN met
	for i := 0; ; i++ {
		if ask {
			sent = monoMicros()
			reply, err = asking(ctx, n.client, sc, cmd)
		} else {
			reply, sent, err = n.exec(ctx, s.scripts, sc, cmd)
		}
		r, addr := redirectOf(err)
		if r == notRedirected || s.health.cluster == nil || i == maxRedirects || r == redirectTryAgain && splittable {
			if tryAgain != nil && r == notRedirected && err != nil && timedOut(ctx, err) {
				// Time run out on a migrating slot says nothing
				// against the server (isServerFailure).
				err = fmt.Errorf("%w (after %w)", err, tryAgain)
			}
			return reply, n, sent, err
		}
		cmd = fresh(cmd)
		switch r {
		case redirectTryAgain:
			tryAgain = err
			if !pause(ctx, min(time.Millisecond<<min(i, 8), tryAgainPause)) {
				return reply, n, sent, err
			}
			n, ask = s.health.nodeFor(ctx, key), false
		default:
			if r == redirectMoved {
				s.cluster.kick(s.clock())
				// A MOVED after another redirect: the masters disagree on
				// the slot's owner (a migration's end, set on one node
				// after another, the source first), and following them
				// back and forth at once would use up maxRedirects before
				// they agree. It waits as for TRYAGAIN.
				if i > 0 && !pause(ctx, min(time.Millisecond<<min(i-1, 8), tryAgainPause)) {
					return reply, n, sent, err
				}
			}
			next := s.health.nodeAt(ctx, addr)
			if next == nil {
				return reply, n, sent, err
			}
			n, ask = next, r == redirectAsk
		}
	}
}

// pause waits d, and reports false at once when ctx would end first.
func pause(ctx context.Context, d time.Duration) bool {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= d {
		return false
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// exec runs cmd, an EVALSHA of sc, on n's server: through n's pipeline
// when it has one, else alone; sent is as batcher.do's.
func (n *node) exec(ctx context.Context, r *runner, sc *script, cmd []any) (reply any, sent int64, err error) {
	if n.pipe != nil {
		return n.pipe.do(ctx, sc, cmd)
	}
	sent = monoMicros()
	reply, err = r.run(ctx, n.client, sc, cmd)
	return reply, sent, err
}

// asking runs cmd, an EVALSHA of sc, on c preceded by ASKING (on the same
// connection, in one pipeline), as an ASK reply asks; as EVAL when c has
// lost the script.
func asking(ctx context.Context, c redis.UniversalClient, sc *script, cmd []any) (any, error) {
	run := func(cmd []any) (any, error) {
		p := c.Pipeline()
		p.Do(ctx, "asking")
		r := p.Do(ctx, cmd...)
		_, err := p.Exec(ctx)
		unanswered([]*redis.Cmd{r}, err)
		return r.Result()
	}
	v, err := run(cmd)
	if isNoScript(err) {
		v, err = run(sc.eval(cmd))
	}
	return v, err
}

// nodeAt returns the server of the Cluster master at addr, as a MOVED or
// ASK reply names it, or nil when the client knows no such master.
func (h *health) nodeAt(ctx context.Context, addr string) *node {
	if n, ok := h.nodes.Load(addr); ok {
		return n.(*node)
	}
	var (
		mu    sync.Mutex
		found *redis.Client
	)
	_ = h.cluster.ForEachMaster(ctx, func(_ context.Context, c *redis.Client) error {
		if c.Options().Addr == addr {
			mu.Lock()
			found = c
			mu.Unlock()
		}
		return nil
	})
	if found == nil {
		return nil
	}
	n, _ := h.nodes.LoadOrStore(addr, h.newNode(addr, found))
	return n.(*node)
}
