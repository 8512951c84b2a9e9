package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/deadline"
)

// defaultPipeline is the number of round trips to Redis a Store keeps in
// flight before it queues Takes for a pipeline, unless WithPipelining says
// otherwise. Two keep two Takes from waiting for each other and make the
// pipelines under load long: in BENCHMARKS.md's runs it beat four at every
// concurrency from 4 to 256 (decisions/s, p99, Redis and client CPU per
// decision), and one made pairs of concurrent Takes wait.
const defaultPipeline = 2

// maxPipeline bounds WithPipelining.
const maxPipeline = 1 << 16

// maxBatch is the most Takes one pipeline carries; more wait for the next.
const maxBatch = 512

// WithPipelining sets how many round trips to Redis the Store has in flight
// at once before concurrent Takes share them; 0 turns automatic pipelining
// off (every Take is its own EVALSHA, as many in flight as the client's
// pool allows). The default is 2.
//
// With pipelining on, a Take is sent at once, alone, when fewer than
// inFlight requests of the Store are under way, so an idle Store adds no
// latency. Otherwise it waits in a queue; when a request returns, everything
// queued (up to 512 Takes) goes to Redis as one pipeline, one network round
// trip and one read and write on each side for all of them. In it, the
// queued Takes of one limit without a penalty (the lean scripts' Takes) of
// one algorithm family and limit go as one script call, and so do the
// other Takes and Charges (several limits, a penalty, a calendar window,
// an InFlight limit), up to 128 limits a call (on a Cluster, those whose
// keys share a slot; on a Ring, a hash tag): one reading of Redis' clock
// (and for the lean scripts' Takes one read of the states of GCRA,
// LeakyBucket, TokenBucket and SlidingWindow), each Take decided by the
// same code and with the same Result as alone, one Take's error (such as a
// key of the wrong type) its own. Each key sees its Takes in the order
// they came: a Take joins a script call only when no call after it holds
// one of its keys. Any other call (a Refund, a recorded Take after a lost
// connection, see record.go) goes alone, after the queued calls before it
// on its slot. On a Cluster each master has its own queue
// and pipelines, sent to it directly (see the package doc about MOVED and
// ASK); a shared script call that a slot migration refuses (TRYAGAIN) goes
// again as one call per Take. Takes that meet NOSCRIPT are sent again as
// EVAL, each alone, which loads their script, and then every script is
// loaded again.
//
// A Take whose context ends while it waits in the queue returns the
// context's error at once and is never sent. One whose pipeline is already
// sent returns the context's error too, but Redis may still charge it, as
// for a Take that times out without pipelining. A pipeline waits for Redis
// until the latest deadline of the contexts in it (with
// ContextTimeoutEnabled; without, go-redis' ReadTimeout applies).
// inFlight must be 0 to 65536.
func WithPipelining(inFlight int) Option {
	return optionFunc(func(s *settings) { s.pipeline = inFlight })
}

// batcher shares round trips between concurrent Takes. Up to max requests
// are in flight; while all are, Takes queue, and the request that returns
// first hands the queue to a goroutine that sends it as one pipeline,
// then the next queue, until the queue is empty.
type batcher struct {
	client  redis.UniversalClient // a Cluster master's, or the Store's
	scripts *runner
	max     int
	shards  int // what the keys of a batch script share: a Cluster's slot (bySlot), a Ring's tag (byTag)

	mu     sync.Mutex
	busy   int       // requests in flight (senders)
	queue  []*call   // waiting; non-empty only while busy == max
	spare  []*call   // a drained queue, for reuse
	flying [][]*call // the batches sent and not yet answered
	// timer wakes the Takes, queued or sent, whose deadline has passed
	// (expire), at armed; they wait for no context's timer (package
	// deadline).
	timer *time.Timer
	armed time.Time // zero: not armed

	pipelined atomic.Int64 // Takes sent in pipelines (for tests)
	resent    atomic.Int64 // of which sent again (NOSCRIPT, a batch's TRYAGAIN)
	batched   atomic.Int64 // of which in batch scripts
}

// call is one queued Take.
type call struct {
	ctx    context.Context
	script *script
	cmd    []any // EVALSHA of script
	reply  any
	err    error
	done   chan struct{} // receives once (signal): reply and err are set, or the call expired (buffered)
	state  atomic.Int32  // callQueued, callSent, callAbandoned, callExpired
	sent   atomic.Int64  // when it was sent (monoMicros); set before state turns callSent
	woken  atomic.Bool   // done was sent to
}

// calls holds the calls of Takes that were answered, for reuse: a queued
// Take costs no allocation of its own. A call whose Take returned early
// (its context ended) is never reused, as the batcher may still hold it.
var calls = sync.Pool{New: func() any { return &call{done: make(chan struct{}, 1)} }}

// reuse puts c, answered and received, back into calls.
func (c *call) reuse() {
	c.ctx, c.script, c.cmd, c.reply, c.err = nil, nil, nil, nil, nil
	c.state.Store(callQueued)
	c.woken.Store(false)
	calls.Put(c)
}

// signal wakes c's Take, once.
func (c *call) signal() {
	if !c.woken.Swap(true) {
		c.done <- struct{}{}
	}
}

const (
	callQueued = iota
	callSent
	callAbandoned // its context ended while it was queued: never sent
	callExpired   // its deadline passed while it was sent (expire)
)

// do runs cmd, an EVALSHA of s, and returns its reply and when it was
// sent (monoMicros), or notSent when ctx ended while it was queued.
func (b *batcher) do(ctx context.Context, s *script, cmd []any) (any, int64, error) {
	b.mu.Lock()
	if b.busy < b.max {
		b.busy++
		b.mu.Unlock()
		sent := monoMicros()
		reply, err := b.scripts.run(ctx, b.client, s, cmd)
		b.release()
		return reply, sent, err
	}
	c := calls.Get().(*call)
	c.ctx, c.script, c.cmd = ctx, s, cmd
	b.queue = append(b.queue, c)
	if d, ok := ctx.Deadline(); ok && (b.armed.IsZero() || d.Before(b.armed)) {
		b.arm(d, time.Until(d))
	}
	b.mu.Unlock()
	select {
	case <-c.done:
		switch c.state.Load() {
		case callAbandoned:
			return nil, notSent, ended(ctx)
		case callExpired:
			return nil, c.sent.Load(), ended(ctx)
		}
		reply, sent, err := c.reply, c.sent.Load(), c.err
		c.reuse()
		return reply, sent, err
	case <-deadline.Early(ctx): // its deadline is expire's
		// Never sent if it was still queued; otherwise its reply is dropped.
		if c.state.CompareAndSwap(callQueued, callAbandoned) || c.state.Load() == callAbandoned {
			return nil, notSent, ctx.Err()
		}
		return nil, c.sent.Load(), ctx.Err()
	}
}

// ended is the error of a call whose context ended (by its deadline,
// perhaps before its timer fired).
func ended(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return context.DeadlineExceeded
}

// arm sets the timer to expire in d, at at; b.mu is held.
func (b *batcher) arm(at time.Time, d time.Duration) {
	b.armed = at
	if b.timer == nil {
		b.timer = time.AfterFunc(d, b.expire)
	} else {
		b.timer.Reset(d)
	}
}

// expire wakes every Take whose deadline has passed, queued (abandoned:
// never sent) or sent (its reply is dropped), and arms the timer for the
// next deadline.
func (b *batcher) expire() {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	var next time.Time
	scan := func(c *call, from, to int32) {
		d, ok := c.ctx.Deadline()
		switch {
		case !ok || c.state.Load() != from:
		case !now.Before(d):
			if c.state.CompareAndSwap(from, to) {
				c.signal()
			}
		case next.IsZero() || d.Before(next):
			next = d
		}
	}
	for _, c := range b.queue {
		scan(c, callQueued, callAbandoned)
	}
	for _, batch := range b.flying {
		for _, c := range batch {
			scan(c, callSent, callExpired)
		}
	}
	b.armed = time.Time{}
	if !next.IsZero() {
		b.arm(next, next.Sub(now))
	}
}

// release ends a request: the queue, if any, goes out as a pipeline from a
// new goroutine (so that the caller returns now), which keeps this slot.
func (b *batcher) release() {
	b.mu.Lock()
	batch := b.next()
	b.mu.Unlock()
	if batch != nil {
		go b.drain(batch)
	}
}

// next returns the next batch to send, or nil, having given up the
// caller's slot, when no live call is queued; b.mu is held. It takes
// batches until one holds a live call, so that a run of more than maxBatch
// abandoned calls cannot strand the live ones behind it.
func (b *batcher) next() []*call {
	for len(b.queue) > 0 {
		if batch := b.take(); len(batch) > 0 {
			b.flying = append(b.flying, batch)
			return batch
		}
	}
	b.busy--
	return nil
}

// take removes up to maxBatch calls from the queue and returns those
// still wanted, marked sent; those whose context has ended are marked
// abandoned; b.mu is held.
func (b *batcher) take() []*call {
	var batch []*call
	if len(b.queue) <= maxBatch {
		batch = b.queue
		b.queue, b.spare = b.spare[:0], nil
	} else {
		batch = make([]*call, maxBatch)
		copy(batch, b.queue)
		n := copy(b.queue, b.queue[maxBatch:])
		clear(b.queue[n:])
		b.queue = b.queue[:n]
	}
	live, now, wall := batch[:0], monoMicros(), time.Now()
	for _, c := range batch {
		c.sent.Store(now)
		if d, ok := c.ctx.Deadline(); ok && !wall.Before(d) || c.ctx.Err() != nil {
			// Ended, and expire's timer may not have fired yet: once out
			// of the queue, only this wakes it.
			if c.state.CompareAndSwap(callQueued, callAbandoned) {
				c.signal()
			}
		} else if c.state.CompareAndSwap(callQueued, callSent) { // else abandoned
			live = append(live, c)
		}
	}
	clear(batch[len(live):])
	return live
}

func (b *batcher) drain(batch []*call) {
	for batch != nil {
		b.pipelined.Add(int64(len(batch)))
		b.resent.Add(int64(b.send(batch)))
		clear(batch)
		b.mu.Lock()
		if b.spare == nil && cap(batch) <= 4*maxBatch {
			b.spare = batch[:0]
		}
		batch = b.next()
		b.mu.Unlock()
	}
}

// send runs every call of live in one pipeline, the calls of one lean
// script on one slot as one call of its batch script (batches), and those
// that met NOSCRIPT, or whose batch met TRYAGAIN, again as EVAL, each its
// own, in a second one, after which every script is loaded again
// (runner.loadAll) if one was lost; it returns how many were sent twice.
func (b *batcher) send(live []*call) (resent int) {
	ctx, cancel := pipelineContext(live)
	defer cancel()
	cmds := make([]*redis.Cmd, len(live)) // each call's command: its own, or its batch's
	entry := make([]int, len(live))       // its reply's place in its batch's; -1: its own
	pipe := b.client.Pipeline()
	for _, g := range b.batches(live) {
		if len(g) == 1 {
			cmds[g[0]], entry[g[0]] = pipe.Do(ctx, live[g[0]].cmd...), -1
			continue
		}
		cmd := pipe.Do(ctx, batchCommand(live, g)...)
		b.batched.Add(int64(len(g)))
		for j, i := range g {
			cmds[i], entry[i] = cmd, j
		}
	}
	_, err := pipe.Exec(ctx)
	unanswered(cmds, err)
	var again []int
	noScript := false
	for i, cmd := range cmds {
		// A batch that met TRYAGAIN held keys that a slot migration has
		// moved and keys that it has not: each call goes alone, to run
		// or be sent on (ASK).
		r, _ := redirectOf(cmd.Err())
		if isNoScript(cmd.Err()) || r == redirectTryAgain && entry[i] >= 0 {
			noScript = noScript || isNoScript(cmd.Err())
			again = append(again, i)
		}
	}
	if len(again) > 0 {
		pipe = b.client.Pipeline()
		for _, i := range again {
			c := live[i]
			cmds[i], entry[i] = pipe.Do(ctx, c.script.eval(c.cmd)...), -1
		}
		_, err = pipe.Exec(ctx)
		unanswered(cmds, err)
	}
	b.landed(live)
	for i, c := range live {
		c.reply, c.err = replyOf(cmds[i], entry[i])
		c.signal()
	}
	if noScript {
		b.scripts.loadAll(ctx)
	}
	return len(again)
}

// landed removes live from the batches in flight, before their Takes are
// woken: expire no longer touches them.
func (b *batcher) landed(live []*call) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, f := range b.flying {
		if len(f) > 0 && f[0] == live[0] {
			last := len(b.flying) - 1
			b.flying[i], b.flying[last] = b.flying[last], nil
			b.flying = b.flying[:last]
			return
		}
	}
}

// maxScriptBatch is the most limits one batch script decides, so that one
// script call holds Redis up no longer than a short pipeline of them.
const maxScriptBatch = 128

// What the keys of one batch script share, by the client's kind: one
// server holds them all; a Cluster's slot, or a Ring's shard, which its
// hash tag picks (two tags of one slot may be on two shards).
const (
	oneServer = iota
	bySlot
	byTag
)

// batches returns the indices of live in groups sent as one command each,
// in the order of their first calls: the calls of the take script (each
// an EVALSHA of its own limits), or of one lean script (each an EVALSHA
// of one key) and one limit (its arguments after the cost), on one slot or
// tag (see shards) in order, up to maxScriptBatch limits; any other call
// alone. Every key sees its calls in order: a call joins its group only
// when no later group holds a call on one of its keys, and a call that
// goes alone, whose script may touch keys it does not name, closes the
// groups of its slot or tag.
func (b *batcher) batches(live []*call) [][]int {
	type group struct {
		sc         *script
		size, slot int    // the command's length: its ARGV's (lean)
		tag        string // byTag
		limit      [maxLeanArgs]any
	}
	var (
		out   [][]int
		open  map[group]int  // a group's place in out while it has room
		sizes []int          // the limits of each group of out
		last  map[string]int // the group of each key's latest call
	)
	for i, c := range live {
		g := group{sc: c.script}
		if b.shards != oneServer && len(c.cmd) > 3 && c.cmd[2] != 0 {
			if k, ok := c.cmd[3].(string); ok && b.shards == bySlot {
				g.slot = slot(k)
			} else if ok {
				g.tag = keyTag(k)
			}
		}
		limits, keys, ok := batchable(c)
		if !ok {
			for o := range open {
				if o.slot == g.slot && o.tag == g.tag {
					delete(open, o)
				}
			}
			out, sizes = append(out, []int{i}), append(sizes, limits)
			continue
		}
		if c.script != takeScript {
			g.size = len(c.cmd)
			copy(g.limit[:], c.cmd[5:])
		} else if last == nil {
			// Only a take script call shares keys with calls of other
			// groups: until one comes, the groups' keys are apart.
			last = map[string]int{}
		}
		j, joins := open[g]
		for _, k := range keys {
			if l, ok := last[k.(string)]; ok && l > j {
				joins = false
			}
		}
		if !joins {
			if open == nil {
				open = map[group]int{}
			}
			j = len(out)
			open[g] = j
			out, sizes = append(out, nil), append(sizes, 0)
		}
		out[j], sizes[j] = append(out[j], i), sizes[j]+limits
		if sizes[j] >= maxScriptBatch {
			delete(open, g)
		}
		if last != nil {
			for _, k := range keys {
				last[k.(string)] = j
			}
		}
	}
	return out
}

// batchable reports whether c may go in a batch script, how many limits
// it decides and its keys: an EVALSHA of the take script, or of a lean
// script with one key and at most maxLeanArgs arguments after the cost.
func batchable(c *call) (limits int, keys []any, ok bool) {
	n, _ := c.cmd[2].(int)
	if c.script.batch == nil || c.cmd[1] != c.script.sha || n < 1 || len(c.cmd) < 4+n {
		return 1, nil, false
	}
	keys = c.cmd[3 : 3+n]
	if c.script == takeScript {
		return n / keysPerLimit, keys, true
	}
	return 1, keys, n == 1 && len(c.cmd) >= 5 && len(c.cmd) <= 5+maxLeanArgs
}

// maxLeanArgs is the most arguments a lean script takes after the cost.
const maxLeanArgs = 3

// batchCommand returns the EVALSHA of the batch script of the calls g of
// live. For a lean script: their keys, then their limit's arguments after
// the cost (the same for all), then each call's cost. For the take
// script: their keys, call after call, then for each call its number of
// keys and of arguments, and its arguments. Each cost is its call's once,
// so that a batch the client sends again is refused call by call.
func batchCommand(live []*call, g []int) []any {
	first := live[g[0]]
	if first.script == takeScript {
		keys, size := 0, 3
		for _, i := range g {
			keys += live[i].cmd[2].(int)
			size += len(live[i].cmd) - 1
		}
		cmd := takeScript.batch.command(keys, size)
		for _, i := range g {
			cmd = append(cmd, live[i].cmd[3:3+live[i].cmd[2].(int)]...)
		}
		for _, i := range g {
			c, k := live[i].cmd, live[i].cmd[2].(int)
			cmd = append(append(cmd, k, len(c)-3-k), c[3+k:]...)
		}
		return cmd
	}
	cmd := first.script.batch.command(len(g), 3+2*len(g)+len(first.cmd)-5)
	for _, i := range g {
		cmd = append(cmd, live[i].cmd[3])
	}
	cmd = append(cmd, first.cmd[5:]...)
	for _, i := range g {
		cmd = append(cmd, live[i].cmd[4])
	}
	return cmd
}

// replyOf returns the reply of a call whose command is cmd: all of it, or
// when the call went in a batch, the reply's entry j, where the text of an
// error stands for it (see lean.lua).
func replyOf(cmd *redis.Cmd, j int) (any, error) {
	v, err := cmd.Result()
	if err != nil || j < 0 {
		return v, err
	}
	if r, ok := v.([]any); ok && j < len(r) {
		if e, ok := r[j].(string); ok {
			return nil, entryError(e)
		}
		return r[j], nil
	}
	return nil, fmt.Errorf("redisstore: a batch script replied %T, want an array of its calls' replies", v)
}

// entryError is the error a call met in a batch script: the error reply
// it would have had alone.
type entryError string

func (e entryError) Error() string { return string(e) }

// RedisError marks it as a reply (redis.Error).
func (entryError) RedisError() {}

// keyTag is key's hash tag, which picks its Cluster slot or Ring shard:
// the text between its first '{' and the first '}' after it when not
// empty, else the whole key.
func keyTag(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return key
}

// slot is the Redis Cluster slot of key: CRC16 (XMODEM) of its hash tag,
// modulo 16384.
func slot(key string) int {
	key = keyTag(key)
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc % 16384)
}

// unanswered gives the pipeline's error to every command of cmds that has
// neither a reply nor an error: go-redis leaves them so when reading the
// replies fails before the first one (a deadline that ran out meanwhile).
func unanswered(cmds []*redis.Cmd, err error) {
	if err == nil {
		err = errNoReply
	}
	for _, cmd := range cmds {
		if cmd.Err() == nil && cmd.Val() == nil {
			cmd.SetErr(err)
		}
	}
}

// errNoReply is the error of a pipelined command that got no reply.
var errNoReply = errors.New("redisstore: no reply in the pipeline")

// pipelineContext is the context of a pipeline that serves every call of
// live: it ends with the latest of their deadlines, or never when one of
// them has none.
func pipelineContext(live []*call) (context.Context, context.CancelFunc) {
	deadline, ok := live[0].ctx.Deadline()
	if !ok {
		return context.Background(), func() {}
	}
	for _, c := range live[1:] {
		d, ok := c.ctx.Deadline()
		if !ok {
			return context.Background(), func() {}
		}
		if d.After(deadline) {
			deadline = d
		}
	}
	return context.WithDeadline(context.Background(), deadline)
}

func isNoScript(err error) bool {
	return err != nil && redis.HasErrorPrefix(err, "NOSCRIPT")
}
