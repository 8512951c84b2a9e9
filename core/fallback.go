package core

import (
	"context"
	"hash/maphash"
	"reflect"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/store"
)

// The local fallback (FailLocal) of every Limiter of a process on one
// store is one localFallback: one memory store, made at the first failure,
// and one table of the last answer the store gave this process per key.
// The Limiters find it in fallbacks, by their store; it registers one
// OnReset hook with the store, when it is made, so that a Reset made
// anywhere clears it once, whatever the number of Limiters.

// fallbacks holds the localFallback of each store (a comparable
// store.Store) while a FailLocal Limiter on it lives: an entry, and its
// reset hook, go away when the last of them is garbage-collected
// (runtime.AddCleanup), so neither the store nor the fallback's memory is
// held after the Limiters are gone.
var fallbacks = struct {
	sync.Mutex
	m map[store.Store]*fallbackUse
}{m: make(map[store.Store]*fallbackUse)}

// fallbackUse is a store's entry in fallbacks.
type fallbackUse struct {
	f      *localFallback
	n      int    // live Limiters using f
	unhook func() // removes f's reset hook; nil: none
}

// fallbacksMade counts the memory stores made as shared fallbacks (tests).
var fallbacksMade atomic.Int64

// A localFallback remembers the last answer of at most rememberShards ×
// rememberShardKeys keys (about 150 bytes each, 10 MB in all); past it, a
// new key displaces another of its shard. A key displaced while the
// fallback holds state for it is not cleared by a Reset announced by
// another process (one made through this process still clears it).
const (
	rememberShards    = 64
	rememberShardKeys = 1024
)

// localFallback is the fallback of the Limiters of this process on one
// store. It is safe for concurrent use.
type localFallback struct {
	mem atomic.Pointer[memorystore.Store] // nil until the first failure
	mu  sync.Mutex                        // guards mem's making and own
	own []store.Store                     // WithFallbackStore stores, cleared on resets too
	// shared is the store the fallback stands in for; fleet is it as a
	// store.Fleet, or nil.
	shared store.Store
	fleet  store.Fleet
	// owed is set when the fallback admitted requests that the shared
	// store has not been charged for yet; flushing while they are charged.
	owed, flushing atomic.Bool
	// holdUntil (Unix ns): until then, keys the fallback admitted while
	// the store was away are still decided by it (see settleHold); 0
	// after a failure, until the store answers again.
	holdUntil atomic.Int64
	hold      time.Duration // settleHold; longer in tests
	// recovering: the debts made while the store was away are being
	// charged, after its first answer; the hold lasts meanwhile.
	recovering atomic.Bool
	seed       maphash.Seed
	recs       [rememberShards]recordShard
}

type recordShard struct {
	mu sync.Mutex
	m  map[string]*record
}

// record is the last answer the store gave this process for a key, and
// what the fallback admitted since.
type record struct {
	known     bool      // the fields below hold a store's answer
	at        time.Time // when the store answered
	until     time.Time // denied until then (zero: allowed)
	full      time.Time // the binding limit is back to its full allowance then
	remaining int64
	limit     int64
	binding   int
	linear    bool      // the allowance comes back steadily (GCRA, token and leaky bucket)
	used      int64     // admitted by the fallback since at, or not charged to the store then
	pending   int64     // the cost of this process's Takes of the key sent to the store, not yet answered
	fellBack  bool      // the fallback admitted the key; cleared once a hold is over (settleHold)
	scouting  bool      // a Take of the fellBack key is on its way to the store
	owed      int64     // admitted by the fallback, not yet charged to the store
	owedUntil time.Time // owed is forgotten then (wall clock): the limits have refilled
	take      []store.Spec
}

// useFallback gives l the localFallback of its store, making it (and
// registering its reset hook) the first time, and releases it when l is
// collected. A store of a type that is not comparable gets a
// localFallback of its own, which hears no resets.
func (l *Limiter) useFallback() {
	s := l.store
	if !reflect.TypeOf(s).Comparable() {
		l.shared = newLocalFallback(s)
		return
	}
	fallbacks.Lock()
	defer fallbacks.Unlock()
	u := fallbacks.m[s]
	if u == nil {
		u = &fallbackUse{f: newLocalFallback(s)}
		if n, ok := s.(store.ResetNotifier); ok {
			u.unhook = n.OnReset(u.f.announced)
		}
		fallbacks.m[s] = u
	}
	u.n++
	l.shared = u.f
	runtime.AddCleanup(l, releaseFallback, s)
}

// releaseFallback ends a collected Limiter's use of the localFallback of
// s, and drops it with its reset hook after the last.
func releaseFallback(s store.Store) {
	fallbacks.Lock()
	defer fallbacks.Unlock()
	u := fallbacks.m[s]
	if u == nil {
		return
	}
	if u.n--; u.n > 0 {
		return
	}
	delete(fallbacks.m, s)
	if u.unhook != nil {
		u.unhook()
	}
}

func newLocalFallback(s store.Store) *localFallback {
	f := &localFallback{seed: maphash.MakeSeed(), shared: s, hold: settleHold}
	f.fleet, _ = s.(store.Fleet)
	for i := range f.recs {
		f.recs[i].m = make(map[string]*record)
	}
	return f
}

// store returns the shared memory store, made at the first call.
func (f *localFallback) store() store.Store {
	if m := f.mem.Load(); m != nil {
		return m
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if m := f.mem.Load(); m != nil {
		return m
	}
	m := memorystore.New()
	fallbacksMade.Add(1)
	f.mem.Store(m)
	return m
}

// adopt adds a WithFallbackStore store, so that resets reach it.
func (f *localFallback) adopt(s store.Store) {
	if !reflect.TypeOf(s).Comparable() {
		return // cannot be told apart: hears only its own Limiter's resets
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, o := range f.own {
		if o == s {
			return
		}
	}
	f.own = append(f.own, s)
}

// record returns key's record, adding it (in place of another when the
// shard is full). The caller holds sh.mu.
func (sh *recordShard) record(key string) *record {
	if r := sh.m[key]; r != nil {
		return r
	}
	if len(sh.m) >= rememberShardKeys {
		for k := range sh.m { // displaces a key of Go's choosing
			delete(sh.m, k)
			break
		}
	}
	r := &record{}
	sh.m[key] = r
	return r
}

func (f *localFallback) shard(key string) *recordShard {
	return &f.recs[maphash.String(f.seed, key)%rememberShards]
}

// remember notes res, the store's answer for key at now under cfg's
// limits, as the starting point of the fallback's decisions for key.
// t is the ticket of the Take that got res (begin). The fallback's
// admissions the store has not been charged for yet count as used from
// the start.
func (f *localFallback) remember(key string, res *store.Result, cfg *limiterConfig, now time.Time, t ticket) {
	sh := f.shard(key)
	sh.mu.Lock()
	r := sh.record(key)
	r.pending = max(r.pending-t.pending, 0)
	r.scouting = false
	if r.fellBack {
		// Held (settleHold): the answer does not count the other
		// instances' debts yet, so the fallback goes on from what it
		// had, counting what the store admitted now.
		if res.Allowed {
			r.used += t.pending - t.owed
		}
		sh.mu.Unlock()
		f.answered()
		return
	}
	r.known, r.at, r.until = true, now, time.Time{}
	if !res.Allowed && res.RetryAfter < store.InfDuration {
		r.until = now.Add(res.RetryAfter)
	}
	r.full = now.Add(res.ResetAfter)
	r.remaining, r.limit, r.binding, r.used = res.Remaining, res.Limit, res.Binding, r.owed
	r.linear = false
	if b := res.Binding; b >= 0 && b < len(cfg.limits) {
		switch cfg.take[b].Algorithm() {
		case store.GCRA, store.TokenBucket, store.LeakyBucket:
			r.linear = true
		case store.InFlight:
			// Free slots come back when requests end, which the answer
			// cannot tell: the fallback store alone decides the key.
			r.known = false
		}
	}
	sh.mu.Unlock()
	f.answered()
}

// announced is the store's reset hook: it forgets key ("" everything) in
// the remembered answers and in the fallback stores.
func (f *localFallback) announced(key string) {
	if key == "" {
		f.clear()
		return
	}
	f.forget(key, nil)
}

// clear forgets every remembered answer (not what is owed to the store)
// and clears the fallback stores.
func (f *localFallback) clear() {
	for i := range f.recs {
		sh := &f.recs[i]
		sh.mu.Lock()
		for k, r := range sh.m {
			if r.owed == 0 {
				delete(sh.m, k)
			} else { // still to be charged to the store
				r.known, r.used = false, 0
			}
		}
		sh.mu.Unlock()
	}
	f.mu.Lock()
	own := f.own
	f.mu.Unlock()
	if m := f.mem.Load(); m != nil {
		m.Clear()
	}
	for _, s := range own {
		if m, ok := s.(*memorystore.Store); ok {
			m.Clear()
		}
	}
}

// forget forgets key's remembered answer and its state in the fallback
// stores under limits, or, for nil limits, under those the fallback last
// decided key with.
func (f *localFallback) forget(key string, limits []store.Spec) bool {
	held := false
	sh := f.shard(key)
	sh.mu.Lock()
	if r := sh.m[key]; r != nil {
		held = true
		if limits == nil {
			limits = r.take
		}
		delete(sh.m, key)
	}
	sh.mu.Unlock()
	if len(limits) == 0 {
		return held
	}
	f.mu.Lock()
	own := f.own
	f.mu.Unlock()
	if m := f.mem.Load(); m != nil {
		// It fails only on bad input, or with store.ErrNotFound.
		held = m.Reset(context.Background(), key, limits...) == nil || held
	}
	for _, s := range own {
		if r, ok := s.(store.Resetter); ok {
			held = r.Reset(context.Background(), key, limits...) == nil || held
		}
	}
	return held
}

// budget returns how much the fallback may have admitted for r's key by
// now in all, from what the store last said: r.remaining until the
// binding limit is full again, growing steadily towards r.limit on the way
// when the algorithm refills steadily; and the time at which need will fit.
// The caller has checked that now is before r.full.
func (r *record) budget(now time.Time, need int64) (int64, time.Time) {
	if !r.linear || r.limit <= r.remaining {
		return r.remaining, r.full
	}
	span, gap := r.full.Sub(r.at), float64(r.limit-r.remaining)
	b := r.remaining + int64(gap*float64(now.Sub(r.at))/float64(span))
	if need <= r.remaining {
		return b, now
	}
	return b, r.at.Add(time.Duration(float64(span) * float64(need-r.remaining) / gap))
}

// take decides a request of key the store could not: from the store's
// last answer for key while it holds (denied until T stays denied until T;
// r remaining admits at most r), and by the fallback store fb; of either,
// it admits only this instance's share (see instances). What it admits is
// owed to the store.
func (f *localFallback) take(ctx context.Context, fb store.Store, key string, cost int64, cfg *limiterConfig, now time.Time) (store.Result, error) {
	n := f.instances()
	sh := f.shard(key)
	sh.mu.Lock()
	r := sh.record(key)
	r.take = cfg.take // what a reset announced by the store clears
	if r.known && !now.Before(r.full) && !now.Before(r.until) {
		r.known, r.used = false, 0 // the store's answer no longer binds
	}
	if !r.known {
		pending := r.pending
		sh.mu.Unlock()
		return f.takeShare(ctx, fb, r, sh, key, cost, cfg, n, pending)
	}
	if now.Before(r.until) {
		defer sh.mu.Unlock()
		return r.denial(now, r.until), nil
	}
	spent := r.used + r.pending // the Takes in flight may be admitted yet
	budget, when := r.budget(now, (spent+cost)*n)
	share := shareOf(budget, n)
	if spent+cost > share {
		defer sh.mu.Unlock()
		return r.denial(now, when), nil
	}
	r.used += cost
	r.owe(cost)
	left := share - spent - cost
	sh.mu.Unlock()
	res, err := takeFolded(ctx, fb, key, cost, cfg)
	if err != nil || !res.Allowed {
		sh.mu.Lock()
		r.used, r.owed = max(r.used-cost, 0), max(r.owed-cost, 0) // the store may have answered since
		sh.mu.Unlock()
		return res, err
	}
	f.owed.Store(true)
	res.Remaining = min(res.Remaining, left)
	return res, nil
}

// takeShare decides a key the store gave no answer for (that still
// holds) by the fallback store, admitting at most this instance's share,
// ⌊L/n⌋ (at least 1), of the binding limit's allowance L.
func (f *localFallback) takeShare(ctx context.Context, fb store.Store, r *record, sh *recordShard, key string, cost int64, cfg *limiterConfig, n, pending int64) (store.Result, error) {
	if p, ok := fb.(store.Peeker); ok && (n > 1 || pending > 0) {
		// Over this instance's share, the request is refused uncharged.
		res, err := p.Peek(ctx, key, cost, cfg.take...)
		if err == nil {
			if res = cfg.fold(res); res.Allowed && overShare(&res, n, pending) {
				return res, nil
			}
		}
	}
	res, err := takeFolded(ctx, fb, key, cost, cfg)
	if err != nil || !res.Allowed || overShare(&res, n, pending) {
		return res, err
	}
	sh.mu.Lock()
	r.owe(cost)
	sh.mu.Unlock()
	f.owed.Store(true)
	return res, nil
}

// overShare tells whether res, an admission by the fallback store, takes
// more than ⌊L/n⌋ (at least 1) of the binding limit's allowance L, with
// pending (this process's Takes of the key on their way to the store)
// counted as spent; if so it turns res into a refusal until the fallback
// has regained the excess, and otherwise caps res.Remaining at what is
// left of the share.
func overShare(res *store.Result, n, pending int64) bool {
	share, spent := shareOf(res.Limit, n), res.Limit-res.Remaining+pending
	if spent <= share {
		res.Remaining = min(res.Remaining, share-spent)
		return false
	}
	retry := time.Duration(float64(res.ResetAfter) * float64(spent-share) / float64(spent))
	res.Allowed, res.Remaining, res.Delay = false, 0, 0
	res.RetryAfter = max(retry, time.Microsecond)
	return true
}

// instances returns the number of processes sharing the store, at least 1.
func (f *localFallback) instances() int64 {
	if f.fleet == nil {
		return 1
	}
	return max(int64(f.fleet.Instances()), 1)
}

// shareOf returns one instance's share of b among n: ⌊b/n⌋, but 1 when
// that is 0 and b is not, so that a small limit still admits on each
// instance. The fleet's shares add up to at most max(b, n).
func shareOf(b, n int64) int64 {
	if b > 0 && b < n {
		return 1
	}
	return b / n
}

// denial is the Result of a request the remembered answer refuses until
// when.
func (r *record) denial(now, when time.Time) store.Result {
	retry := max(when.Sub(now), time.Microsecond)
	return store.Result{
		Limit: r.limit, RetryAfter: retry, Binding: r.binding,
		ResetAfter: max(r.full.Sub(now), retry),
	}
}

// takeFolded takes cost for key from s under cfg's limits; from a
// store.Refunder with Charge, so that a count-by-outcome give-back (see
// WithCountIf) knows when it was charged.
func takeFolded(ctx context.Context, s store.Store, key string, cost int64, cfg *limiterConfig) (store.Result, error) {
	var res store.Result
	var err error
	if r, ok := s.(store.Refunder); ok {
		res, err = r.Charge(ctx, key, cost, cfg.take...)
	} else {
		res, err = s.Take(ctx, key, cost, cfg.take...)
	}
	if err != nil {
		return store.Result{}, err
	}
	return cfg.fold(res), nil
}
