package redisstore

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/internal/arith"
)

// The Store's scripts (package lua). The take script serves every Take;
// a lean script per algorithm file (its family's, see families) serves a
// Take of one limit without a penalty, the common call, with only the
// keys, arguments and reply that its algorithm needs. Both read and write
// the same state in the same key, so a limit may be charged by either.
var (
	takeScript  = batching(charging(takeSource), takeBatch)
	fenceScript = newScript(fenceSource)
)

// allScripts is every script, loaded together: the general ones, then each
// family's lean script (once per file) with its twin and batch script.
var allScripts = func() []*script {
	all := []*script{takeScript, takeScript.twin, takeScript.batch, fenceScript, leaseScript, refundScript, lockScript}
	for _, a := range store.Algorithms() {
		if s := families[a].script; s != nil && !slices.Contains(all, s) {
			all = append(all, s, s.twin, s.batch)
		}
	}
	return all
}()

// script is a Lua script and the heads of the commands that run it, boxed
// once: a Take builds its whole command in one slice (see command).
type script struct {
	*redis.Script
	sha, src any
	twin     *script // the recorded twin of a charging script (record.go); nil for others
	batch    *script // the batch script of a lean script or the take script (pipeline.go); nil for others
}

// charging returns the script of src with its recorded twin.
func charging(src string) *script {
	s := newScript(src)
	s.twin = newScript(recorded(src))
	return s
}

// batching returns s with its batch script, of src.
func batching(s *script, src string) *script {
	s.batch = newScript(src)
	return s
}

func newScript(src string) *script {
	s := redis.NewScript(src)
	return &script{Script: s, sha: s.Hash(), src: src}
}

// command returns the start of an EVALSHA of s with numKeys keys, room
// for size arguments in all.
func (s *script) command(numKeys, size int) []any {
	cmd := make([]any, 3, size)
	cmd[0], cmd[1], cmd[2] = "evalsha", s.sha, numKeys
	return cmd
}

// eval returns cmd, an EVALSHA of s that did not run (NOSCRIPT), as an
// EVAL, which loads s, to be sent again (see fresh).
func (s *script) eval(cmd []any) []any {
	e := fresh(cmd)
	e[0], e[1] = "eval", s.src
	return e
}

// family is how the Redis store runs an algorithm: its code in the take
// script's ARGV, and its lean script (leanScript: its Lua file, and whether
// the batch reads its state with MGET) with that script's ARGV after the
// cost and the decoding of its reply (see the decoders below).
type family struct {
	code    string
	script  *script
	args    func(s *store.Spec) []int64
	decode  func(p *prepared, n int64, v [3]int64) store.Result
	replies int // integers in the lean script's reply, at most 3
	// unpack, when not nil, turns a reply of one integer into the
	// replies integers decode takes (fixed.lua packs its two when exact;
	// log.lua sends the usual admission as its count alone).
	unpack func(p *prepared, x int64) [3]int64
}

// families maps every algorithm to its code and scripts: the one place that does.
var families = map[store.Algorithm]*family{
	store.GCRA:          {"g", leanScript("tat.lua", true), tatArgs, decodeGCRA, 1, nil},
	store.LeakyBucket:   {"k", leanScript("tat.lua", true), tatArgs, decodeLeaky, 1, nil},
	store.TokenBucket:   {"t", leanScript("token.lua", true), tokenArgs, decodeToken, 1, nil},
	store.FixedWindow:   {"f", leanScript("fixed.lua", false), windowArgs, decodeFixed, 2, unpackFixed},
	store.SlidingWindow: {"w", leanScript("sliding.lua", true), windowArgs, decodeSliding, 3, nil},
	store.SlidingLog:    {"l", leanScript("log.lua", false), logArgs, decodeLog, 3, logShort},
	// InFlight has no lean script: the take script serves it.
	store.InFlight: {code: "i", decode: decodeInFlight},
}

func tatArgs(s *store.Spec) []int64    { return []int64{s.Capacity(), s.Interval()} }
func tokenArgs(s *store.Spec) []int64  { return []int64{s.Rate(), s.Period(), s.Burst()} }
func windowArgs(s *store.Spec) []int64 { return []int64{s.Rate(), s.Period()} }

// logArgs: R, P and the key's lifetime in ms after a charge, ceil(P/1000).
func logArgs(s *store.Spec) []int64 {
	return []int64{s.Rate(), s.Period(), arith.CeilDiv(s.Period(), 1000)}
}

// The lean scripts reply with the state after the call and the verdict in
// the sign of their first integer: x >= 0 when allowed, ^x (-x-1) when
// denied. The decoders below derive the figures with ALGORITHMS.md's
// arithmetic; n is the cost decided (a dry run's too), p's spec has every
// size below 2^53, so no product of figures up to n's capacity overflows.

// verdict splits a lean reply's first integer.
func verdict(x int64) (allowed bool, v int64) {
	if x < 0 {
		return false, ^x
	}
	return true, x
}

func decodeGCRA(p *prepared, n int64, v [3]int64) store.Result { return tatResult(p, n, v[0], false) }

func decodeLeaky(p *prepared, n int64, v [3]int64) store.Result { return tatResult(p, n, v[0], true) }

// tatResult: the reply is used = tat - now after the call (allowed), or
// before it (denied).
func tatResult(p *prepared, n, x int64, leaky bool) store.Result {
	lim, T := p.capacity, p.spec.Interval()
	tol := lim * T
	ok, used := verdict(x)
	r := store.Result{Allowed: ok, Limit: lim, ResetAfter: arith.Micros(used)}
	if tol > used {
		r.Remaining = (tol - used) / T
	}
	switch {
	case ok && leaky && n > 0:
		r.Delay = arith.Micros(used - T)
	case !ok && n > lim:
		r.RetryAfter = store.InfDuration
	case !ok:
		r.RetryAfter = arith.Micros(used + n*T - tol)
	}
	return r
}

// decodeToken: the reply is tok, the tokens scaled by P after the call
// (allowed) or refilled to now (denied).
func decodeToken(p *prepared, n int64, v [3]int64) store.Result {
	R, P, B := p.spec.Rate(), p.spec.Period(), p.spec.Burst()
	ok, tok := verdict(v[0])
	r := store.Result{Allowed: ok, Limit: B, Remaining: tok / P, ResetAfter: arith.Micros(arith.CeilDiv(B*P-tok, R))}
	switch {
	case !ok && n > B:
		r.RetryAfter = store.InfDuration
	case !ok:
		r.RetryAfter = arith.Micros(arith.CeilDiv(n*P-tok, R))
	}
	return r
}

// unpackFixed splits fixed.lua's reply of one integer, c·P + left - 1
// when allowed or -(c·P + left) when denied, into {c or ^c, left}.
func unpackFixed(p *prepared, x int64) [3]int64 {
	P := p.spec.Period()
	if x >= 0 {
		return [3]int64{x / P, x%P + 1}
	}
	y := -x - 1
	return [3]int64{^(y / P), y%P + 1}
}

// decodeFixed: the reply is the window's count c after the call (allowed)
// or before it (denied), and left = end - now.
func decodeFixed(p *prepared, n int64, v [3]int64) store.Result {
	R := p.spec.Rate()
	ok, c := verdict(v[0])
	left := arith.Micros(v[1])
	r := store.Result{Allowed: ok, Limit: R, Remaining: R - c}
	if c > 0 {
		r.ResetAfter = left
	}
	switch {
	case !ok && n > R:
		r.RetryAfter = store.InfDuration
	case !ok:
		r.RetryAfter = left
	}
	return r
}

// decodeSliding: the reply is the current window's count c after the call
// (allowed) or before it (denied), the previous window's p, and e, how far
// now is into the current window.
func decodeSliding(p *prepared, n int64, v [3]int64) store.Result {
	R, P := p.spec.Rate(), p.spec.Period()
	ok, c := verdict(v[0])
	prev, e := v[1], v[2]
	r := store.Result{Allowed: ok, Limit: R}
	if rem := R*P - prev*(P-e) - c*P; rem > 0 {
		r.Remaining = rem / P
	}
	switch {
	case c > 0:
		r.ResetAfter = arith.Micros(2*P - e)
	case prev > 0:
		r.ResetAfter = arith.Micros(P - e)
	}
	switch {
	case !ok && n > R:
		r.RetryAfter = store.InfDuration
	case !ok:
		r.RetryAfter = arith.Micros(arith.SlidingWindowRetry(R, P, e, c, prev, n))
	}
	return r
}

// decodeLog: the reply is the count c of live entries after the call
// (allowed) or before it (denied), reset, and the retry of a denied cost up
// to R, all computed by the script from the log; or, for an admission whose
// newest entry is stamped now, c alone (see logShort).
func decodeLog(p *prepared, n int64, v [3]int64) store.Result {
	R := p.spec.Rate()
	ok, c := verdict(v[0])
	r := store.Result{Allowed: ok, Limit: R, Remaining: R - c, ResetAfter: arith.Micros(v[1])}
	switch {
	case !ok && n > R:
		r.RetryAfter = store.InfDuration
	case !ok:
		r.RetryAfter = arith.Micros(v[2])
	}
	return r
}

// decodeInFlight: the take script's reply (inflight.lua) is the count c of
// live slots after the call (allowed) or before it (denied), reset, and
// a denial's retry.
func decodeInFlight(p *prepared, _ int64, v [3]int64) store.Result {
	R := p.spec.Rate()
	ok, c := verdict(v[0])
	r := store.Result{Allowed: ok, Limit: R, Remaining: R - c, ResetAfter: arith.Micros(v[1])}
	if !ok {
		r.RetryAfter = arith.Micros(v[2])
	}
	return r
}

// logShort expands the log script's one-integer reply: c >= 0 live entries
// after an admission whose newest entry is stamped now (reset P), or none
// (reset 0).
func logShort(p *prepared, c int64) [3]int64 {
	if c == 0 {
		return [3]int64{}
	}
	return [3]int64{c, p.spec.Period(), 0}
}

// decodeLean turns a lean script's reply into the Result of a Take of n
// (negative: a dry run of -n) on the one limit p.
func decodeLean(p *prepared, n int64, reply any) (store.Result, error) {
	var v [3]int64
	k := 0
	switch r := reply.(type) {
	case int64:
		v[0], k = r, 1
		if f := p.lean; f.unpack != nil {
			v, k = f.unpack(p, r), f.replies
		}
	case []any:
		for ; k < len(r) && k < len(v); k++ {
			x, ok := r[k].(int64)
			if !ok {
				return store.Result{}, fmt.Errorf("redisstore: take: script reply holds %T, want integers", r[k])
			}
			v[k] = x
		}
		k = len(r)
	}
	if k != p.lean.replies {
		return store.Result{}, fmt.Errorf("redisstore: take: script replied %T of %d integers, want %d", reply, k, p.lean.replies)
	}
	return p.lean.decode(p, abs(n), v), nil
}

func abs(n int64) int64 {
	if n < 0 {
		return -n
	}
	return n
}

// int64s returns the integers of the take script's reply.
func int64s(reply any) ([]int64, error) {
	r, ok := reply.([]any)
	if !ok {
		return nil, fmt.Errorf("redisstore: take: script replied %T, want an array", reply)
	}
	v := make([]int64, len(r))
	for i, x := range r {
		if v[i], ok = x.(int64); !ok {
			return nil, fmt.Errorf("redisstore: take: script reply holds %T, want integers", x)
		}
	}
	return v, nil
}

// leanArgs renders a lean script's ARGV after the cost, once per limit.
func leanArgs(f *family, s *store.Spec) []any {
	var out []any
	for _, x := range f.args(s) {
		out = append(out, x)
	}
	return out
}

// runner runs scripts by EVALSHA, and by EVAL when Redis has lost one.
type runner struct {
	client  redis.UniversalClient // the Store's: loadAll loads through it
	loading atomic.Bool           // a reload is under way
	lost    func()                // told when Redis lost the scripts; may be nil
}

// run runs cmd, an EVALSHA of s (see script.command), on c (the Store's
// client, or a Cluster master's) and returns its reply. A script that
// Redis has lost (NOSCRIPT) is sent again as EVAL, which loads it, and
// every other script is loaded again too (reload).
func (r *runner) run(ctx context.Context, c redis.UniversalClient, s *script, cmd []any) (any, error) {
	v, err := c.Do(ctx, cmd...).Result()
	if isNoScript(err) {
		v, err = r.reload(ctx, c, s, cmd)
	}
	return v, err
}

// reload runs cmd, an EVALSHA of s that met NOSCRIPT, as an EVAL and loads
// every other script: whatever lost one (a restart, a failover, SCRIPT
// FLUSH) lost them all, and each would otherwise cost a Take its own
// NOSCRIPT round trip. A single server gets the loads and the EVAL in one
// pipeline; on a Cluster the master sends the EVAL, then every SCRIPT LOAD
// to all of its nodes. One reload runs at a time (the others only EVAL);
// the loads' errors are left for the next EVALSHA to meet.
func (r *runner) reload(ctx context.Context, client redis.UniversalClient, s *script, cmd []any) (any, error) {
	if !r.loading.CompareAndSwap(false, true) {
		return client.Do(ctx, s.eval(cmd)...).Result()
	}
	defer r.loading.Store(false)
	if r.lost != nil {
		r.lost() // a restart, perhaps: the Store checks in the background
	}
	if c, ok := client.(*redis.Client); ok && client == r.client {
		var eval *redis.Cmd
		_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
			loadOthers(ctx, p, s)
			eval = p.Do(ctx, s.eval(cmd)...)
			return nil
		})
		unanswered([]*redis.Cmd{eval}, err)
		return eval.Result()
	}
	v, err := client.Do(ctx, s.eval(cmd)...).Result()
	if err == nil {
		loadOthers(ctx, r.client, nil) // s too: the EVAL loaded it on one node
	}
	return v, err
}

// loadAll loads every script, unless a reload is under way: the pipelines
// of Takes that met NOSCRIPT send them again as EVAL themselves.
func (r *runner) loadAll(ctx context.Context) {
	if r.loading.CompareAndSwap(false, true) {
		loadOthers(ctx, r.client, nil)
		r.loading.Store(false)
	}
}

// loadOthers sends SCRIPT LOAD for every script but s.
func loadOthers(ctx context.Context, c redis.Scripter, s *script) {
	for _, o := range allScripts {
		if o != s && o.Load(ctx, c).Err() != nil {
			return
		}
	}
}
