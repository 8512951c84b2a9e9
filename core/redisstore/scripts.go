package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/lua"
)

// The Store's scripts (package lua). The take script serves every Take;
// a lean script per algorithm family serves a Take of one limit without a
// penalty, the common call, with only the keys, arguments and reply that
// its algorithm needs. Both read and write the same state in the same key,
// so a limit may be charged by either.
var (
	takeScript    = redis.NewScript(lua.Take)
	tatScript     = redis.NewScript(lua.TAT)
	tokenScript   = redis.NewScript(lua.Token)
	fixedScript   = redis.NewScript(lua.Fixed)
	slidingScript = redis.NewScript(lua.Sliding)
	logScript     = redis.NewScript(lua.Log)
)

// allScripts is every script, loaded together.
var allScripts = [...]*redis.Script{takeScript, tatScript, tokenScript, fixedScript, slidingScript, logScript}

// family is how the Redis store runs an algorithm: its code in the take
// script's ARGV, and its lean script with that script's ARGV after the cost
// and the decoding of its reply (see lean below).
type family struct {
	code    string
	script  *redis.Script
	args    func(s *core.Spec) []int64
	decode  func(p *prepared, n int64, v []int64) core.Result
	replies int // integers in the lean script's reply
}

// families maps every algorithm to its scripts: the one place that does.
var families = map[core.Algorithm]*family{
	core.GCRA:          {lua.CodeGCRA, tatScript, tatArgs, decodeGCRA, 1},
	core.LeakyBucket:   {lua.CodeLeakyBucket, tatScript, tatArgs, decodeLeaky, 1},
	core.TokenBucket:   {lua.CodeTokenBucket, tokenScript, tokenArgs, decodeToken, 1},
	core.FixedWindow:   {lua.CodeFixedWindow, fixedScript, windowArgs, decodeFixed, 2},
	core.SlidingWindow: {lua.CodeSlidingWindow, slidingScript, windowArgs, decodeSliding, 3},
	core.SlidingLog:    {lua.CodeSlidingLog, logScript, windowArgs, decodeLog, 3},
}

func tatArgs(s *core.Spec) []int64    { return []int64{s.Capacity(), s.Interval} }
func tokenArgs(s *core.Spec) []int64  { return []int64{s.Rate, s.Period, s.Burst} }
func windowArgs(s *core.Spec) []int64 { return []int64{s.Rate, s.Period} }

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

func decodeGCRA(p *prepared, n int64, v []int64) core.Result { return tatResult(p, n, v[0], false) }

func decodeLeaky(p *prepared, n int64, v []int64) core.Result { return tatResult(p, n, v[0], true) }

// tatResult: the reply is used = tat - now after the call (allowed), or
// before it (denied).
func tatResult(p *prepared, n, x int64, leaky bool) core.Result {
	lim, T := p.capacity, p.spec.Interval
	tol := lim * T
	ok, used := verdict(x)
	r := core.Result{Allowed: ok, Limit: lim, ResetAfter: micros(used)}
	if tol > used {
		r.Remaining = (tol - used) / T
	}
	switch {
	case ok && leaky && n > 0:
		r.Delay = micros(used - T)
	case !ok && n > lim:
		r.RetryAfter = core.InfDuration
	case !ok:
		r.RetryAfter = micros(used + n*T - tol)
	}
	return r
}

// decodeToken: the reply is tok, the tokens scaled by P after the call
// (allowed) or refilled to now (denied).
func decodeToken(p *prepared, n int64, v []int64) core.Result {
	R, P, B := p.spec.Rate, p.spec.Period, p.spec.Burst
	ok, tok := verdict(v[0])
	r := core.Result{Allowed: ok, Limit: B, Remaining: tok / P, ResetAfter: micros(ceilDiv(B*P-tok, R))}
	switch {
	case !ok && n > B:
		r.RetryAfter = core.InfDuration
	case !ok:
		r.RetryAfter = micros(ceilDiv(n*P-tok, R))
	}
	return r
}

// decodeFixed: the reply is the window's count c after the call (allowed)
// or before it (denied), and left = end - now.
func decodeFixed(p *prepared, n int64, v []int64) core.Result {
	R := p.spec.Rate
	ok, c := verdict(v[0])
	left := micros(v[1])
	r := core.Result{Allowed: ok, Limit: R, Remaining: R - c}
	if c > 0 {
		r.ResetAfter = left
	}
	switch {
	case !ok && n > R:
		r.RetryAfter = core.InfDuration
	case !ok:
		r.RetryAfter = left
	}
	return r
}

// decodeSliding: the reply is the current window's count c after the call
// (allowed) or before it (denied), the previous window's p, and e, how far
// now is into the current window.
func decodeSliding(p *prepared, n int64, v []int64) core.Result {
	R, P := p.spec.Rate, p.spec.Period
	ok, c := verdict(v[0])
	prev, e := v[1], v[2]
	r := core.Result{Allowed: ok, Limit: R}
	if rem := R*P - prev*(P-e) - c*P; rem > 0 {
		r.Remaining = rem / P
	}
	switch {
	case c > 0:
		r.ResetAfter = micros(2*P - e)
	case prev > 0:
		r.ResetAfter = micros(P - e)
	}
	switch {
	case !ok && n > R:
		r.RetryAfter = core.InfDuration
	case !ok:
		r.RetryAfter = micros(slidingRetry(R, P, c, prev, e, n))
	}
	return r
}

// slidingRetry is ALGORITHMS.md's retry of a denied cost n <= R: later in
// this window if the previous one's weight can fade enough, else in the
// next one.
func slidingRetry(R, P, c, prev, e, n int64) int64 {
	if R-c-n >= 0 && prev > 0 {
		if e1 := P - (R-c-n)*P/prev; e1 < P {
			return e1 - e
		}
	}
	var e2 int64
	if c > 0 {
		e2 = max(0, P-(R-n)*P/c)
	}
	return (P - e) + e2
}

// decodeLog: the reply is the count c of live entries after the call
// (allowed) or before it (denied), reset, and the retry of a denied cost up
// to R, all computed by the script from the log.
func decodeLog(p *prepared, n int64, v []int64) core.Result {
	R := p.spec.Rate
	ok, c := verdict(v[0])
	r := core.Result{Allowed: ok, Limit: R, Remaining: R - c, ResetAfter: micros(v[1])}
	switch {
	case !ok && n > R:
		r.RetryAfter = core.InfDuration
	case !ok:
		r.RetryAfter = micros(v[2])
	}
	return r
}

// ceilDiv is ceil(a/b) for a >= 0, b > 0.
func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// decodeLean turns a lean script's reply into the Result of a Take of n
// (negative: a dry run of -n) on the one limit p.
func decodeLean(p *prepared, n int64, reply any) (core.Result, error) {
	var buf [3]int64
	v, err := int64s(reply, buf[:0])
	if err == nil && len(v) != p.lean.replies {
		err = fmt.Errorf("%d integers, want %d", len(v), p.lean.replies)
	}
	if err != nil {
		return core.Result{}, fmt.Errorf("redisstore: take: script reply: %w", err)
	}
	return p.lean.decode(p, abs(n), v), nil
}

func abs(n int64) int64 {
	if n < 0 {
		return -n
	}
	return n
}

// int64s appends the integers of a script's reply (an integer or an array
// of integers) to buf.
func int64s(reply any, buf []int64) ([]int64, error) {
	switch v := reply.(type) {
	case int64:
		return append(buf, v), nil
	case []any:
		for _, x := range v {
			i, ok := x.(int64)
			if !ok {
				return nil, fmt.Errorf("%T in the reply, want integers", x)
			}
			buf = append(buf, i)
		}
		return buf, nil
	}
	return nil, fmt.Errorf("reply of type %T, want integers", reply)
}

// leanArgs renders a lean script's ARGV after the cost, once per limit.
func leanArgs(f *family, s *core.Spec) []any {
	var out []any
	for _, x := range f.args(s) {
		out = append(out, strconv.FormatInt(x, 10))
	}
	return out
}

// runner runs scripts by EVALSHA, and by EVAL when Redis has lost one.
type runner struct {
	client  redis.UniversalClient
	loading atomic.Bool // a reload is under way
}

// run runs script with keys and args and returns its reply. A script that
// Redis has lost (NOSCRIPT) is sent again as EVAL, and then every script is
// loaded again (reload).
func (r *runner) run(ctx context.Context, script *redis.Script, keys []string, args []any) (any, error) {
	v, err := script.EvalSha(ctx, r.client, keys, args...).Result()
	if isNoScript(err) {
		v, err = script.Eval(ctx, r.client, keys, args...).Result()
		if err == nil {
			r.reload(ctx)
		}
	}
	return v, err
}

// reload loads every script (SCRIPT LOAD: on every node for a Cluster or
// Ring client) after Redis was found to have lost one: whatever lost one
// (a restart, a failover, SCRIPT FLUSH) lost them all, and each would
// otherwise cost a Take its own NOSCRIPT round trip. One reload runs at a
// time; its errors are left for the next EVALSHA to meet.
func (r *runner) reload(ctx context.Context) {
	if !r.loading.CompareAndSwap(false, true) {
		return
	}
	defer r.loading.Store(false)
	for _, s := range allScripts {
		if s.Load(ctx, r.client).Err() != nil {
			return
		}
	}
}
