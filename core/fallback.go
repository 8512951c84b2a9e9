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
func (f *localFallback) remember(key string, res *Result, cfg *limiterConfig, now time.Time, t ticket) {
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
		case GCRA, TokenBucket, LeakyBucket:
			r.linear = true
		case InFlight:
			// Free slots come back when requests end, which the answer
			// cannot tell: the fallback store alone decides the key.
			r.known = false
		}
	}
	sh.mu.Unlock()
	f.answered()
}

// answered notes that the store answered a Take: a hold starts if none
// has since the last failure, and what the fallback owes is charged.
func (f *localFallback) answered() {
	if f.holdUntil.Load() == 0 && f.holdUntil.CompareAndSwap(0, time.Now().Add(f.hold).UnixNano()) && f.owed.Load() {
		f.recovering.Store(true)
	}
	if f.owed.Load() && f.flushing.CompareAndSwap(false, true) {
		go f.settle()
	}
}

// settleHold is how long after the store answers again, having failed,
// the keys the fallback admitted are still decided by it (within its
// share) while its debts are charged: time for the other instances, whose
// probes find the store back at about the same moment, to charge theirs,
// so that no instance admits through the store what another instance's
// fallback already admitted. The hold lasts while the debts this instance
// made while the store was away are charged (the first settle after its
// answer), and settleHold after. A lone instance does not hold. Until the store answers,
// one Take per such key at a time is sent to it (the key's debt rides
// along), the others are decided by the fallback.
const settleHold = 200 * time.Millisecond

// ticket is what begin noted of a Take for after to settle.
type ticket struct {
	owed    int64 // the key's debt, carried by the Take
	pending int64 // added to the key's pending
	hold    bool  // not to be sent: the fallback decides the key (settleHold)
}

// begin notes a Take of cost for key about to be sent to the store: it
// claims what the fallback owes the store for key, for the Take to carry
// (so that the store admits nothing of what the fallback already
// admitted), and counts the Take as pending until after: a decision the
// fallback makes meanwhile leaves room for it. A key without a
// remembered answer is not tracked.
func (f *localFallback) begin(key string, cost int64) ticket {
	sh := f.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	r := sh.m[key]
	if r == nil {
		return ticket{}
	}
	var t ticket
	if r.fellBack {
		switch hu := f.holdUntil.Load(); {
		case f.instances() == 1:
			r.fellBack = false // no other instance's debt to wait for
		case hu == 0 && !r.scouting:
			r.scouting = true // the key's one Take until the store answers
		case hu == 0 || time.Now().UnixNano() < hu || f.recovering.Load():
			return ticket{hold: true}
		default:
			r.fellBack = false // the hold is over
		}
	}
	if f.owed.Load() || f.flushing.Load() {
		t.owed = r.due()
	}
	t.pending = cost + t.owed
	r.pending += t.pending
	return t
}

// after settles t, the ticket of a Take of key that ended with res or err
// at now: an answer is remembered, a failure ends the Take's pending, and
// a debt the store did not take is owed again (failed) or charged apart
// (refused).
func (f *localFallback) after(key string, t ticket, res *Result, err error, cfg *limiterConfig, now time.Time) {
	if err == nil {
		f.remember(key, res, cfg, now, t)
	} else {
		f.holdUntil.Store(0) // a hold starts when the store answers again
		sh := f.shard(key)
		sh.mu.Lock()
		if r := sh.m[key]; r != nil && t.pending > 0 {
			r.pending = max(r.pending-t.pending, 0)
			r.scouting = false
		}
		sh.mu.Unlock()
	}
	if t.owed > 0 && (err != nil || !res.Allowed) {
		f.unclaim(key, t.owed, cfg.take, err != nil)
	}
}

// unclaim settles n, claimed for key, that the store was not charged: it
// owes it again if the store failed, and otherwise (the store refused the
// Take that carried it) charges what fits.
func (f *localFallback) unclaim(key string, n int64, take []store.Spec, failed bool) {
	d := &debt{key, n, take}
	if !failed {
		go f.settleOne(d)
		return
	}
	sh := f.shard(key)
	sh.mu.Lock()
	sh.record(key).owed += n // until the owedUntil it had
	sh.mu.Unlock()
	f.owed.Store(true)
}

// debt is what the fallback admitted for key, to be charged to the store.
type debt struct {
	key  string
	n    int64
	take []store.Spec
}

// settle charges the store with what the fallback admitted while it was
// away, once it answers again, so that a key's admissions in all stay
// within about one allowance. It runs in a goroutine of its own, started
// by the first answer of the store after the fallback admitted something,
// charges settleWorkers keys at a time, and ends when everything is
// charged; what the store fails to take stays owed, for the next answer.
func (f *localFallback) settle() {
	defer f.flushing.Store(false)
	defer func() {
		if f.recovering.Swap(false) {
			f.extendHold()
		}
	}()
	f.owed.Store(false)
	var keys []string
	for i := range f.recs {
		sh := &f.recs[i]
		sh.mu.Lock()
		for k, r := range sh.m {
			if r.owed > 0 {
				keys = append(keys, k)
			}
		}
		sh.mu.Unlock()
	}
	var failed atomic.Bool // the store failed: the rest waits for its next answer
	work := make(chan string)
	var wg sync.WaitGroup
	for range min(settleWorkers, len(keys)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range work {
				if !failed.Load() && !f.settleKey(k) {
					failed.Store(true)
					f.owed.Store(true)
				}
			}
		}()
	}
	for _, k := range keys {
		work <- k
	}
	close(work)
	wg.Wait()
}

// settleKey charges what key owes, and reports whether the store took
// it. The debt stays with the key while it is charged, so that a request
// for the key carries it (claim) rather than passing uncharged; the two
// may then both charge it, which errs on the safe side.
func (f *localFallback) settleKey(key string) bool {
	sh := f.shard(key)
	sh.mu.Lock()
	r := sh.m[key]
	var d debt
	if r != nil && r.owed > 0 && time.Now().Before(r.owedUntil) {
		d = debt{key, r.owed, r.take}
	} else if r != nil {
		r.owed = 0
	}
	sh.mu.Unlock()
	if d.n == 0 {
		return true
	}
	if f.charge(&d) != nil {
		return false
	}
	sh.mu.Lock()
	r.owed = max(r.owed-d.n, 0)
	sh.mu.Unlock()
	return true
}

// extendHold makes a hold under way last settleHold past now: settle has
// charged this instance's debts, and the other instances are given as
// long again to charge theirs.
func (f *localFallback) extendHold() {
	until := time.Now().Add(f.hold).UnixNano()
	for {
		hu := f.holdUntil.Load()
		if hu == 0 || hu >= until || f.holdUntil.CompareAndSwap(hu, until) {
			return
		}
	}
}

// settleWorkers is how many keys settle charges at a time.
const settleWorkers = 16

// settleOne charges d to the store, or owes it again if the store fails.
func (f *localFallback) settleOne(d *debt) {
	if f.charge(d) == nil {
		return
	}
	sh := f.shard(d.key)
	sh.mu.Lock()
	if r := sh.m[d.key]; r != nil {
		r.owed += d.n
	}
	sh.mu.Unlock()
	f.owed.Store(true)
}

// settleTimeout bounds each call settle makes to the store.
const settleTimeout = time.Second

// charge charges d to the store: all of it when it fits, otherwise what
// is left of the key's allowance, so that the charge is never refused
// (nor sets a penalty lock). A store that cannot peek is not charged.
func (f *localFallback) charge(d *debt) error {
	ctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
	defer cancel()
	p, ok := f.shared.(store.Peeker)
	take := withoutInFlight(d.take)
	if !ok || len(take) == 0 {
		return nil
	}
	res, err := p.Peek(ctx, d.key, d.n, take...)
	if err != nil {
		return err
	}
	n := d.n
	if !res.Allowed {
		n = min(n, res.Remaining)
	}
	if n <= 0 {
		return nil
	}
	_, err = f.shared.Take(ctx, d.key, n, take...)
	return err
}

// withoutInFlight returns take without its InFlight limits: a debt is
// charged by no request, so a slot it took would never be released.
func withoutInFlight(take []store.Spec) []store.Spec {
	for i := range take {
		if take[i].Algorithm() == InFlight {
			out := make([]store.Spec, 0, len(take)-1)
			for _, s := range take {
				if s.Algorithm() != InFlight {
					out = append(out, s)
				}
			}
			return out
		}
	}
	return take
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
func (f *localFallback) take(ctx context.Context, fb store.Store, key string, cost int64, cfg *limiterConfig, now time.Time) (Result, error) {
	n := f.instances()
	sh := f.shard(key)
	sh.mu.Lock()
	r := sh.record(key)
	r.take = cfg.take // what a reset announced by the store clears
	if r.known && !now.Before(r.full) && !now.Before(r.until) {
		r.known, r.used = false, 0 // the store's answer no longer binds
	}
	if !r.known {
		sh.mu.Unlock()
		return f.takeShare(ctx, fb, r, sh, key, cost, cfg, n)
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
func (f *localFallback) takeShare(ctx context.Context, fb store.Store, r *record, sh *recordShard, key string, cost int64, cfg *limiterConfig, n int64) (Result, error) {
	if p, ok := fb.(store.Peeker); ok && n > 1 {
		// Over this instance's share, the request is refused uncharged.
		res, err := p.Peek(ctx, key, cost, cfg.take...)
		if err == nil {
			if res = cfg.fold(res); res.Allowed && overShare(&res, n) {
				return res, nil
			}
		}
	}
	res, err := takeFolded(ctx, fb, key, cost, cfg)
	if err != nil || !res.Allowed || overShare(&res, n) {
		return res, err
	}
	sh.mu.Lock()
	r.owe(cost)
	sh.mu.Unlock()
	f.owed.Store(true)
	return res, nil
}

// overShare tells whether res, an admission by the fallback store, takes
// more than ⌊L/n⌋ (at least 1) of the binding limit's allowance L; if so it turns res
// into a refusal until the fallback has regained the excess, and
// otherwise caps res.Remaining at what is left of the share.
func overShare(res *Result, n int64) bool {
	share, spent := shareOf(res.Limit, n), res.Limit-res.Remaining
	if spent <= share {
		res.Remaining = min(res.Remaining, share-spent)
		return false
	}
	retry := time.Duration(float64(res.ResetAfter) * float64(spent-share) / float64(spent))
	res.Allowed, res.Remaining, res.Delay = false, 0, 0
	res.RetryAfter = max(retry, time.Microsecond)
	return true
}

// owe adds n to what r's key owes the store, until the longest horizon of
// its limits from now: past it, the admissions no longer count against any
// limit, and charging them would refuse what the limits allow.
func (r *record) owe(n int64) {
	r.fellBack = true
	var h int64
	for i := range r.take {
		h = max(h, r.take[i].Horizon())
	}
	r.owed += n
	h = min(h, int64(100*365*24*time.Hour/time.Microsecond)) // no overflow below
	r.owedUntil = time.Now().Add(time.Duration(h) * time.Microsecond)
}

// due returns what r's key owes the store now, and owes nothing after.
func (r *record) due() int64 {
	n := r.owed
	r.owed = 0
	if time.Now().After(r.owedUntil) {
		return 0
	}
	return n
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
func (r *record) denial(now, when time.Time) Result {
	retry := max(when.Sub(now), time.Microsecond)
	return Result{
		Limit: r.limit, RetryAfter: retry, Binding: r.binding,
		ResetAfter: max(r.full.Sub(now), retry),
	}
}

// takeFolded takes cost for key from s under cfg's limits; from a
// store.Refunder with Charge, so that a count-by-outcome give-back (see
// WithCountIf) knows when it was charged.
func takeFolded(ctx context.Context, s store.Store, key string, cost int64, cfg *limiterConfig) (Result, error) {
	var res Result
	var err error
	if r, ok := s.(store.Refunder); ok {
		res, err = r.Charge(ctx, key, cost, cfg.take...)
	} else {
		res, err = s.Take(ctx, key, cost, cfg.take...)
	}
	if err != nil {
		return Result{}, err
	}
	return cfg.fold(res), nil
}
