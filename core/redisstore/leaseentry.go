package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/internal/arith"
)

// lease is one key's lease under one limit in this process: the units
// granted by Redis and not spent yet, and what is needed to refill it.
//
// Concurrency: every field below mu is under mu. At most one refill is
// under way at a time (busy); Takes that find no units wait for it, so a
// hot key costs one script call per refill however many goroutines take
// it. A refill starts ahead of need when a quarter of the lease is left,
// so that under steady load Takes rarely wait.
type lease struct {
	rkey   string    // the Redis state key, as the exact path's
	p      *prepared // the limit: its take script ARGV (code, R, P, B, T) and decoder
	window bool      // FixedWindow or SlidingWindow: units end with their window
	min    int64     // least and most a lease holds (see LeaseConfig)
	max    int64

	mu    sync.Mutex
	units int64 // unspent, usable until until
	until int64 // µs on the Store's clock
	win   int64 // window index the units were granted in (windows)
	size  int64 // what a refill tops the lease up to, min..max
	// The last grant: when it was sent (µs), and Redis' Limit, Remaining
	// (after the grant) and ResetAfter (µs) then.
	t0, lim, rem, reset int64
	spent, mark         int64 // units spent since mark (µs): the local rate
	last                int64 // the last Take (µs)
	deny                leaseDenial
	busy                chan struct{} // non-nil while a refill is under way; closed at its end
	dead                bool          // dropped from the table: Takes go back to it
}

// leaseDenial is Redis' refusal of a refill sent at t0 for a cost of n,
// repeated to Takes of n or more until until (min(retry, TTL) after t0).
type leaseDenial struct{ n, t0, until, lim, rem, retry, reset int64 }

// leaseReply is the lease script's reply (see lua/lease.lua).
type leaseReply struct{ granted, limit, remaining, retry, reset, win, left int64 }

// newLease returns the entry of lk, or nil when its limit is invalid or
// too small to lease.
func (l *leases) newLease(lk leaseKey) *lease {
	spec := lk.limit
	if arith.CheckSpec(spec) != nil {
		return nil
	}
	most := min(l.cfg.MaxUnits, spec.Capacity()/l.cfg.Share)
	if most < 2 {
		return nil
	}
	p, err := l.st.prepare(spec)
	if err != nil {
		return nil
	}
	least := min(l.cfg.MinUnits, most)
	now := l.st.clock()
	return &lease{
		rkey:   l.st.redisKey(lk.key, stateSuffix(&spec)),
		p:      p,
		window: spec.Algorithm() == store.FixedWindow || spec.Algorithm() == store.SlidingWindow,
		min:    least, max: most,
		size: min(max(int64(l.cfg.HotTakes), least), most),
		mark: now, last: now,
	}
}

// take decides a Take of n from e: from its units when it holds n that
// are still valid, from its denial while that lasts, else after a refill
// (its own, or one under way). ok false: e was dropped, or n is larger
// than a lease; the exact path decides.
func (e *lease) take(ctx context.Context, l *leases, n int64) (store.Result, bool, error) {
	if n > e.max {
		return store.Result{}, false, nil
	}
	for {
		if err := ctx.Err(); err != nil {
			return store.Result{}, true, leaseErr(n, err)
		}
		now := l.st.clock()
		e.mu.Lock()
		if e.dead {
			e.mu.Unlock()
			return store.Result{}, false, nil
		}
		e.last = now
		if e.units >= n && now < e.until {
			r, ahead := e.spend(n, now)
			e.mu.Unlock()
			if ahead {
				l.refillAhead(e)
			}
			return r, true, nil
		}
		if r, ok := e.deny.answer(n, now); ok {
			e.mu.Unlock()
			return r, true, nil
		}
		if wait := e.busy; wait != nil {
			e.mu.Unlock()
			select {
			case <-wait:
			case <-ctx.Done():
			}
			continue
		}
		e.busy = make(chan struct{})
		e.mu.Unlock()
		return l.refill(ctx, e, n)
	}
}

// spend takes n of e's units for a Take at now and returns its Result; it
// reports whether a refill ahead of need should start (e.busy is then
// set). e.mu is held.
func (e *lease) spend(n, now int64) (store.Result, bool) {
	e.units -= n
	e.spent += n
	r := store.Result{Allowed: true, Limit: e.lim, Remaining: min(e.lim, e.rem+e.units), ResetAfter: arith.Micros(e.reset - (now - e.t0))}
	if e.busy == nil && e.units*4 <= e.size && now >= e.deny.until {
		e.busy = make(chan struct{})
		return r, true
	}
	return r, false
}

// answer returns the remembered denial for a Take of n at now, if it
// applies: RetryAfter and ResetAfter count down from Redis' figures.
func (d *leaseDenial) answer(n, now int64) (store.Result, bool) {
	if now >= d.until || n < d.n {
		return store.Result{}, false
	}
	el := max(0, now-d.t0)
	return store.Result{Limit: d.lim, Remaining: d.rem, RetryAfter: arith.Micros(d.retry - el), ResetAfter: arith.Micros(d.reset - el)}, true
}

// refillAhead refills e in the background; the caller has set e.busy.
func (l *leases) refillAhead(e *lease) {
	l.bg.Add(1)
	go func() {
		defer l.bg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), l.cfg.TTL)
		defer cancel()
		_, _, _ = l.refill(ctx, e, 0)
	}()
}

// refill asks Redis to top e up to its size, giving back in the same call
// the units of a lease that has ended, and ends the refill (e.busy, set
// by the caller). A Take of n > 0 waits for it and gets n of the grant,
// or Redis' refusal; n == 0 is a refill ahead of need.
func (l *leases) refill(ctx context.Context, e *lease, n int64) (store.Result, bool, error) {
	t0 := l.st.clock()
	e.mu.Lock()
	var ret, rwin int64
	if t0 >= e.until && e.units > 0 {
		ret, rwin, e.units = e.units, e.win, 0
	}
	e.resize(t0, l.ttl)
	want := max(e.size-e.units, n, 1)
	e.mu.Unlock()

	rep, err := l.call(ctx, e, max(n, 1), want, ret, rwin)

	e.mu.Lock()
	defer func() {
		close(e.busy)
		e.busy = nil
		e.mu.Unlock()
	}()
	switch {
	case err != nil:
		return store.Result{}, true, leaseErr(n, err)
	case rep.granted == 0:
		return e.refused(n, t0, l.ttl, rep), true, nil
	}
	return e.install(n, t0, l.ttl, rep), true, nil
}

// resize sets the size of the next refill to the units spent locally in
// about one TTL, within min..max, once a quarter TTL has been measured or
// a whole lease spent. e.mu is held.
func (e *lease) resize(now, ttl int64) {
	if d := now - e.mark; d > 0 && (d >= ttl/4 || e.spent >= e.size) {
		e.size = min(max(e.spent*ttl/d, e.min), e.max)
		e.spent, e.mark = 0, now
	}
}

// install adds a grant, for a refill sent at t0, to e and returns the
// Result of the Take of n it was made for (n == 0: none). A dropped e
// (a reset) keeps nothing: the Take gets its n, the rest is not spent.
// Units of an earlier window are void. e.mu is held.
func (e *lease) install(n, t0, ttl int64, r leaseReply) store.Result {
	e.spent += n
	if e.dead {
		return store.Result{Allowed: true, Limit: r.limit, Remaining: r.remaining, ResetAfter: arith.Micros(r.reset)}
	}
	if e.window && r.win != e.win {
		e.units = 0
	}
	e.units += r.granted - n
	e.win = r.win
	e.until = t0 + ttl
	if e.window {
		e.until = min(e.until, t0+r.left)
	}
	e.t0, e.lim, e.rem, e.reset = t0, r.limit, r.remaining, r.reset
	e.deny = leaseDenial{}
	return store.Result{Allowed: true, Limit: r.limit, Remaining: min(r.limit, r.remaining+e.units), ResetAfter: arith.Micros(r.reset)}
}

// refused remembers Redis' refusal of a refill sent at t0 for a Take of n
// (n == 0: ahead of need, refused for 1) and returns the Take's Result.
// e.mu is held.
func (e *lease) refused(n, t0, ttl int64, r leaseReply) store.Result {
	if !e.dead && r.retry > 0 {
		e.deny = leaseDenial{n: max(n, 1), t0: t0, until: t0 + min(r.retry, ttl),
			lim: r.limit, rem: r.remaining, retry: r.retry, reset: r.reset}
	}
	return store.Result{Limit: r.limit, Remaining: r.remaining, RetryAfter: retryDuration(r.retry), ResetAfter: arith.Micros(r.reset)}
}

// call runs the lease script for e through the breaker of e's server:
// give back ret units granted in window rwin, then grant at least n and
// at most want (n == 0: give back only).
func (l *leases) call(ctx context.Context, e *lease, n, want, ret, rwin int64) (leaseReply, error) {
	server := l.st.health.nodeFor(ctx, e.rkey)
	if err := server.admit(ctx); err != nil {
		return leaseReply{}, err
	}
	l.calls.Add(1)
	start := monoMicros()
	a := &e.p.args
	// n is sent as a once, whatever it is: a give-back sent twice would
	// return its units twice.
	cmd := append(leaseScript.command(1, 13), e.rkey, a[0], a[1], a[2], a[3], a[4],
		&once{arg: strconv.AppendInt(nil, n, 10)}, strconv.FormatInt(want, 10), strconv.FormatInt(ret, 10), strconv.FormatInt(rwin, 10))
	reply, server, sent, err := l.st.send(ctx, server, e.rkey, leaseScript, cmd, false)
	server.report(ctx, err, start, sent)
	var v []int64
	if err == nil {
		v, err = int64s(reply)
	}
	if err != nil {
		if l.st.cluster != nil {
			l.st.cluster.kick(l.st.clock())
		}
		return leaseReply{}, err
	}
	if len(v) != leaseReplies {
		return leaseReply{}, fmt.Errorf("lease script replied %d integers, want %d", len(v), leaseReplies)
	}
	// the limit's three integers, decoded as a Take's of n
	r := families[e.p.alg].decode(e.p, n, [3]int64{v[1], v[2], v[3]})
	retry := r.RetryAfter.Microseconds()
	if r.RetryAfter == store.InfDuration {
		retry = retryNever
	}
	return leaseReply{v[0], r.Limit, r.Remaining, retry, r.ResetAfter.Microseconds(), v[4], v[5]}, nil
}

func leaseErr(n int64, err error) error {
	return fmt.Errorf("redisstore: take %d on 1 limit(s) (lease): %w", n, err)
}

// run is the sweeper: every quarter TTL it gives back the units of leases
// that have ended and drops the entries of keys idle for a TTL.
func (l *leases) run() {
	defer close(l.done)
	t := time.NewTicker(l.cfg.TTL / 4)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			l.sweep(l.st.clock(), false)
		case <-l.stop:
			return
		}
	}
}

// leaseReturn is a lease's unspent units, granted in window win, on their
// way back to Redis.
type leaseReturn struct {
	e     *lease
	units int64
	win   int64
}

// sweep gives back the units of every lease that ended by now and drops
// the entries idle for a TTL since; with all, it gives back every lease
// and drops every entry (Close).
func (l *leases) sweep(now int64, all bool) {
	var back []leaseReturn
	for i := range l.shards {
		sh := &l.shards[i]
		sh.mu.Lock()
		for lk, e := range sh.m {
			units, win, drop := e.expire(now, l.ttl, all)
			if units > 0 {
				back = append(back, leaseReturn{e, units, win})
			}
			if drop {
				delete(sh.m, lk)
				l.keys.Add(-1)
			}
		}
		sh.mu.Unlock()
	}
	if len(back) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), max(l.cfg.TTL, time.Second))
	defer cancel()
	for _, b := range back {
		_, _ = l.call(ctx, b.e, 0, 0, b.units, b.win) // on failure the units are lost: less, never more
	}
}

// expire takes the units of e when its lease has ended by now (or all),
// and reports whether e is to be dropped: idle for ttl, or all. A lease
// being refilled is left to the refill, unless all.
func (e *lease) expire(now, ttl int64, all bool) (units, win int64, drop bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.busy != nil && !all {
		return 0, 0, false
	}
	if all || now >= e.until {
		units, win, e.units = e.units, e.win, 0
	}
	if all || now >= e.until && now-e.last >= ttl {
		e.dead, drop = true, true
	}
	return units, win, drop
}

// forget drops the leases of key (of every key for "") without giving
// them back: a Reset here or announced, or missed announcements. "" also
// means that the Store has (re)subscribed: leases may be taken from then
// on. It is safe on a nil *leases.
func (l *leases) forget(key string) {
	if l == nil {
		return
	}
	if key == "" {
		defer l.live.Store(true)
	}
	for i := range l.shards {
		sh := &l.shards[i]
		sh.mu.Lock()
		for lk, e := range sh.m {
			if key == "" || lk.key == key {
				e.mu.Lock()
				e.units, e.dead, e.deny = 0, true, leaseDenial{}
				e.mu.Unlock()
				delete(sh.m, lk)
				l.keys.Add(-1)
			}
		}
		sh.mu.Unlock()
	}
}

// close stops the sweeper, waits for refills ahead of need, and gives
// back every lease. It is safe on a nil *leases.
func (l *leases) close() {
	if l == nil {
		return
	}
	l.once.Do(func() {
		l.started.Do(func() { close(l.done) }) // no sweeper ran, and none will
		close(l.stop)
		<-l.done
		l.bg.Wait()
		l.sweep(l.st.clock(), true)
	})
}
