// Package fallback decides for a shared store while its backend fails: a
// Store wraps a backend (the Redis store's own calls) and a local store
// (a memory store), and is the Redis store's one entry for every call.
//
// While the backend answers, a call passes through with a deadline, and
// the call and its answer are noted (a lock of the key's shard before and
// after). When it fails (an
// error, a deadline, an open breaker), the local store decides, starting
// from the backend's last answer for the key and taking only this
// process's share of it; what it admits is owed to the backend and
// charged to it by a background pass once it answers again. See
// ALGORITHMS.md, "While the store is away".
package fallback

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/internal/deadline"
	"github.com/sluicehq/sluice/internal/nofallback"
)

// A Store remembers the last answer of at most rememberShards ×
// rememberShardKeys keys (about 150 bytes each, 10 MB in all); past it, a
// new key displaces another of its shard.
const (
	rememberShards    = 64
	rememberShardKeys = 1024
)

// errHeld is the cause of a decision of a key the fallback admitted while
// the backend was away, made locally for a moment after the backend is
// back (see settleHold).
var errHeld = errors.New("sluice: held by the local fallback while its debts settle")

// Config configures a Store.
type Config struct {
	// Timeout bounds every backend call (0: none); past it, the call
	// fails and the local store decides.
	Timeout time.Duration
	// Local is the store that decides while the backend fails; nil turns
	// the fallback off (calls pass through with the deadline).
	Local store.Store
	// Instances returns the number of processes sharing the backend (at
	// least 1 is assumed); nil: 1.
	Instances func() int
	// Now is the clock of the remembered answers; nil: time.Now.
	Now func() time.Time
	// Log is where the first local decision of each outage is logged;
	// nil: slog.Default().
	Log *slog.Logger
	// Hold is how long the keys the fallback admitted stay with it after
	// its debts are charged (see settleHold, the default): time for the
	// other instances to find the backend back and charge theirs. The
	// Redis store sets its breakers' cooldown (their probes' period) and
	// settleHold.
	Hold time.Duration
}

// Store is a store.Store that calls its backend within a deadline and,
// when the backend fails, decides with its local store. It is safe for
// concurrent use. Close waits for its background pass.
type Store struct {
	backend   store.Store
	local     store.Store
	timeout   time.Duration
	instances func() int
	now       func() time.Time
	log       *slog.Logger
	// away: the fallback decided since the backend last answered (the
	// first local decision of an outage is logged).
	away atomic.Bool

	// owed: the fallback admitted requests the backend has not been
	// charged for yet; flushing while they are charged (settle).
	owed, flushing atomic.Bool
	// holdUntil (Unix ns of now): until then, keys the fallback admitted
	// while the backend was away are still decided by it (settleHold); 0
	// after a failure, until the backend answers again.
	holdUntil atomic.Int64
	hold      time.Duration
	// recovering: the debts made while the backend was away are being
	// charged, after its first answer; the hold lasts meanwhile.
	recovering atomic.Bool
	settling   sync.WaitGroup
	retryMu    sync.Mutex
	retry      *time.Timer // markOwed's pending pass
	closed     bool        // Close ran: no more retries
	seed       maphash.Seed
	recs       [rememberShards]recordShard
}

type recordShard struct {
	mu sync.Mutex
	m  map[string]*record
}

// record is the last answer the backend gave for a key, and what the
// fallback admitted since.
type record struct {
	known     bool      // the fields below hold a backend's answer
	at        time.Time // when the backend answered
	until     time.Time // denied until then (zero: allowed)
	full      time.Time // the binding limit is back to its full allowance then
	remaining int64
	limit     int64
	binding   int
	linear    bool      // the allowance comes back steadily (GCRA, token and leaky bucket)
	used      int64     // admitted by the fallback since at, or not charged to the backend then
	pending   int64     // the cost of Takes of the key sent to the backend, not yet answered
	fellBack  bool      // the fallback admitted the key; cleared once a hold is over (settleHold)
	scouting  bool      // a Take of the fellBack key is on its way to the backend
	owed      int64     // admitted by the fallback, not yet charged to the backend
	owedUntil time.Time // owed is forgotten then: the limits have refilled
	owedSince time.Time // when owed last became positive
	unsure    []unsure  // calls whose reply was lost, to settle (uncertain.go)
	charging  bool      // settleKey is charging the key's debt: Takes hold meanwhile
	limits    []store.Spec
}

// New returns a Store over backend.
func New(backend store.Store, c Config) *Store {
	f := &Store{backend: backend, local: c.Local, timeout: c.Timeout, instances: c.Instances,
		now: c.Now, log: c.Log, hold: c.Hold, seed: maphash.MakeSeed()}
	if f.hold <= 0 {
		f.hold = settleHold
	}
	if f.now == nil {
		f.now = time.Now
	}
	if f.log == nil {
		f.log = slog.Default()
	}
	for i := range f.recs {
		f.recs[i].m = make(map[string]*record)
	}
	return f
}

// Close stops the retries of the background pass that charges the
// backend, and waits for a pass under way.
func (f *Store) Close() {
	f.retryMu.Lock()
	f.closed = true
	if f.retry != nil && f.retry.Stop() {
		f.retry = nil
		f.settling.Done()
	}
	f.retryMu.Unlock()
	f.settling.Wait()
}

// Take charges the backend, or decides locally when it fails.
func (f *Store) Take(ctx context.Context, key string, n int64, limits ...store.Spec) (store.Result, error) {
	return f.decide(ctx, key, n, limits, false)
}

// Charge is Take with a stamp (store.Store.Charge).
func (f *Store) Charge(ctx context.Context, key string, n int64, limits ...store.Spec) (store.Result, error) {
	return f.decide(ctx, key, n, limits, true)
}

func (f *Store) decide(ctx context.Context, key string, n int64, limits []store.Spec, charge bool) (store.Result, error) {
	if f.local == nil {
		return f.call(ctx, func(ctx context.Context) (store.Result, error) { return f.take(ctx, key, n, limits, charge) })
	}
	t := f.begin(key, n)
	if t.hold && nofallback.Allowed(ctx) {
		return f.decideLocally(ctx, key, n, limits, charge, errHeld, false)
	}
	res, err := f.call(ctx, func(ctx context.Context) (store.Result, error) { return f.take(ctx, key, n+t.owed, limits, charge) })
	f.after(key, t, &res, err, limits)
	if err == nil {
		if f.away.Load() {
			f.away.Store(false)
		}
		return res, nil
	}
	var u *Uncertain
	if !errors.As(err, &u) {
		u = nil
	}
	if !f.mayFallBack(ctx, err) {
		f.unsureOf(key, limits, u, t.owed)
		return res, err
	}
	res, lerr := f.decideLocally(ctx, key, n, limits, charge, err, false)
	owe := t.owed
	if lerr == nil && res.Allowed {
		owe += n
	}
	f.unsureOf(key, limits, u, owe)
	return res, lerr
}

func (f *Store) take(ctx context.Context, key string, n int64, limits []store.Spec, charge bool) (store.Result, error) {
	if charge {
		return f.backend.Charge(ctx, key, n, limits...)
	}
	return f.backend.Take(ctx, key, n, limits...)
}

// call runs do with the backend's deadline. An error after the deadline
// wraps context.DeadlineExceeded, whatever the client says ("i/o timeout").
func (f *Store) call(ctx context.Context, do func(context.Context) (store.Result, error)) (store.Result, error) {
	if f.timeout <= 0 {
		return do(ctx)
	}
	tctx := deadline.New(ctx, f.timeout) // no timer unless waited for (see package deadline)
	defer tctx.Cancel()
	res, err := do(tctx)
	if err != nil && ctx.Err() == nil && tctx.Err() == context.DeadlineExceeded && !errors.Is(err, context.DeadlineExceeded) {
		err = fmt.Errorf("%w: %w", context.DeadlineExceeded, err)
	}
	return res, err
}

// mayFallBack reports whether a call that failed with err is decided
// locally: not when its caller is gone or asked for the backend's error
// (nofallback.Mark), nor for bad input.
func (f *Store) mayFallBack(ctx context.Context, err error) bool {
	return ctx.Err() == nil && nofallback.Allowed(ctx) &&
		!errors.Is(err, store.ErrEmptyKey) && !errors.Is(err, store.ErrNegativeCost) &&
		!errors.Is(err, store.ErrInvalidLimit)
}

// decideLocally decides a call the backend could not: the Result's
// Fallback is cause, and its Stamp and Slot are negated, so that Refund
// and Release find the local store.
func (f *Store) decideLocally(ctx context.Context, key string, n int64, limits []store.Spec, charge bool, cause error, dry bool) (store.Result, error) {
	if !dry && !f.away.Load() && f.away.CompareAndSwap(false, true) {
		f.log.Warn("sluice: the store failed; its local fallback decides until it answers again (logged once per outage)",
			"error", cause.Error())
	}
	// After a call that may have run, the admission is owed through its
	// settlement (uncertain.go), not directly.
	// A connection lost under load (churn) is no outage: the key is not
	// held after it (see settleHold).
	owe := !errors.As(cause, new(*Uncertain))
	res, err := f.takeLocal(ctx, key, n, limits, charge, dry, owe, !lostConnection(cause))
	if err != nil {
		return store.Result{}, fmt.Errorf("%w (the local fallback failed too: %v)", cause, err)
	}
	res.Fallback, res.Stamp, res.Slot = cause, -res.Stamp, -res.Slot
	return res, nil
}

// Peek asks the backend, or the fallback when it fails.
func (f *Store) Peek(ctx context.Context, key string, n int64, limits ...store.Spec) (store.Result, error) {
	res, err := f.call(ctx, func(ctx context.Context) (store.Result, error) { return f.backend.Peek(ctx, key, n, limits...) })
	if err == nil || f.local == nil || !f.mayFallBack(ctx, err) {
		return res, err
	}
	res, err = f.decideLocally(ctx, key, n, limits, false, err, true)
	return res, err
}

// Refund gives a charge back where it was made: in the local store for a
// local decision (a negative stamp), where it also cancels what the
// charge owed the backend.
func (f *Store) Refund(ctx context.Context, key string, n int64, stamp int64, limits ...store.Spec) error {
	if stamp >= 0 || f.local == nil {
		_, err := f.call(ctx, func(ctx context.Context) (store.Result, error) {
			return store.Result{}, f.backend.Refund(ctx, key, n, stamp, limits...)
		})
		return err
	}
	if err := f.local.Refund(ctx, key, n, -stamp, limits...); err != nil {
		return err
	}
	sh := f.shard(key)
	sh.mu.Lock()
	if r := sh.m[key]; r != nil {
		r.owed, r.used = max(r.owed-n, 0), max(r.used-n, 0)
	}
	sh.mu.Unlock()
	return nil
}

// Release frees a slot where it was taken: in the local store for a
// local decision (a negative slot).
func (f *Store) Release(ctx context.Context, key string, slot int64, limits ...store.Spec) error {
	if slot < 0 && f.local != nil {
		return f.local.Release(ctx, key, -slot, limits...)
	}
	_, err := f.call(ctx, func(ctx context.Context) (store.Result, error) {
		return store.Result{}, f.backend.Release(ctx, key, slot, limits...)
	})
	return err
}

// Reset clears key in the fallback (what it remembers and its local
// state), then in the backend, with ctx as given. It succeeds when the
// backend found nothing to reset but the fallback did.
func (f *Store) Reset(ctx context.Context, key string, limits ...store.Spec) error {
	held := f.forget(key, limits)
	err := f.backend.Reset(ctx, key, limits...)
	if held && errors.Is(err, store.ErrNotFound) {
		return nil
	}
	return err
}

// Announced forgets key ("" everything) in the remembered answers and the
// local store: the backend announced a reset made elsewhere.
func (f *Store) Announced(key string) {
	if key == "" {
		f.clear()
		return
	}
	f.forget(key, nil)
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

func (f *Store) shard(key string) *recordShard {
	return &f.recs[maphash.String(f.seed, key)%rememberShards]
}

// remember notes res, the backend's answer for key under limits, as the
// starting point of the fallback's decisions for key. t is the ticket of
// the Take that got res (begin). The fallback's admissions the backend
// has not been charged for yet count as used from the start.
func (f *Store) remember(key string, res *store.Result, limits []store.Spec, t ticket) {
	now := f.now()
	sh := f.shard(key)
	sh.mu.Lock()
	r := sh.record(key)
	r.pending = max(r.pending-t.pending, 0)
	r.scouting = false
	if r.fellBack {
		// Held (settleHold): the answer does not count the other
		// instances' debts yet, so the fallback goes on from what it
		// had, counting what the backend admitted now.
		if res.Allowed {
			r.used += t.pending - t.owed
		}
		sh.mu.Unlock()
		f.answered()
		return
	}
	remaining := res.Remaining
	if r.known && res.Allowed && r.until.IsZero() && now.Before(r.full) && r.limit == res.Limit && r.binding == res.Binding {
		// Answers may be handled out of the order the backend gave them
		// (several connections, a process short of CPU): one claiming
		// more left than the last answer allows by now, less what the
		// fallback admitted and charged since, is older than it.
		b, _ := r.budget(now, 0)
		remaining = min(remaining, max(b-(r.used-r.owed), 0))
	}
	r.known, r.at, r.until = true, now, time.Time{}
	if !res.Allowed && res.RetryAfter < store.InfDuration {
		r.until = now.Add(res.RetryAfter)
	}
	r.full = now.Add(res.ResetAfter)
	r.remaining, r.limit, r.binding, r.used = remaining, res.Limit, res.Binding, r.owed
	r.linear = false
	if b := res.Binding; b >= 0 && b < len(limits) {
		switch limits[b].Algorithm() {
		case store.GCRA, store.TokenBucket, store.LeakyBucket:
			r.linear = true
		case store.InFlight:
			// Free slots come back when requests end, which the answer
			// cannot tell: the local store alone decides the key.
			r.known = false
		}
	}
	sh.mu.Unlock()
	f.answered()
}

// clear forgets every remembered answer (not what is owed to the
// backend), and the local state of every key it remembers.
func (f *Store) clear() {
	for i := range f.recs {
		sh := &f.recs[i]
		sh.mu.Lock()
		for k, r := range sh.m {
			if f.local != nil && len(r.limits) > 0 {
				_ = f.local.Reset(context.Background(), k, r.limits...) // fails only without state
			}
			if r.owed == 0 && len(r.unsure) == 0 {
				delete(sh.m, k)
			} else { // still to be charged to the backend
				r.known, r.used = false, 0
			}
		}
		sh.mu.Unlock()
	}
}

// forget forgets key's remembered answer and its local state under
// limits, or, for nil limits, under those the fallback last decided key
// with; it reports whether it held anything of key.
func (f *Store) forget(key string, limits []store.Spec) bool {
	held := false
	sh := f.shard(key)
	sh.mu.Lock()
	if r := sh.m[key]; r != nil {
		held = true
		if limits == nil {
			limits = r.limits
		}
		delete(sh.m, key)
	}
	sh.mu.Unlock()
	if len(limits) == 0 || f.local == nil {
		return held
	}
	// A memory store fails only on bad input, or with store.ErrNotFound.
	return f.local.Reset(context.Background(), key, limits...) == nil || held
}

// budget returns how much the fallback may have admitted for r's key by
// now in all, from what the backend last said: r.remaining until the
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

// takeLocal decides a request of key the backend could not: from the
// backend's last answer for key while it holds (denied until T stays
// denied until T; r remaining admits at most r), and by the local store;
// of either, it admits only this instance's share (see instanceCount).
// What it admits is owed to the backend. A dry run (Peek) changes nothing.
func (f *Store) takeLocal(ctx context.Context, key string, n int64, limits []store.Spec, charge, dry, owe, hold bool) (store.Result, error) {
	owed := n // what an admission owes the backend
	if !owe {
		owed = 0
	}
	now := f.now()
	fleet := f.instanceCount()
	sh := f.shard(key)
	sh.mu.Lock()
	r := sh.record(key)
	r.limits = limits // what a reset announced by the backend clears
	if r.known && !now.Before(r.full) && !now.Before(r.until) {
		r.known, r.used = false, 0 // the backend's answer no longer binds
	}
	if !r.known {
		pending := r.pending
		sh.mu.Unlock()
		return f.takeShare(ctx, r, sh, key, n, owed, limits, charge, dry, hold, fleet, pending)
	}
	if now.Before(r.until) {
		defer sh.mu.Unlock()
		return r.denial(now, r.until), nil
	}
	spent := r.used + r.pending // the Takes in flight may be admitted yet
	budget, when := r.budget(now, (spent+n)*fleet)
	share := shareOf(budget, fleet)
	if spent+n > share {
		defer sh.mu.Unlock()
		return r.denial(now, when), nil
	}
	if dry {
		sh.mu.Unlock()
		res, err := f.local.Peek(ctx, key, n, limits...)
		res.Remaining = min(res.Remaining, share-spent-n)
		return res, err
	}
	r.used += n
	was := r.fellBack
	r.owe(owed, now)
	r.fellBack = was || hold
	left := share - spent - n
	sh.mu.Unlock()
	res, err := f.localTake(ctx, key, n, limits, charge)
	if err != nil || !res.Allowed {
		sh.mu.Lock()
		r.used, r.owed = max(r.used-n, 0), max(r.owed-owed, 0) // the backend may have answered since
		sh.mu.Unlock()
		return res, err
	}
	if owed > 0 {
		f.markOwed()
	}
	res.Remaining = min(res.Remaining, left)
	return res, nil
}

func (f *Store) localTake(ctx context.Context, key string, n int64, limits []store.Spec, charge bool) (store.Result, error) {
	if charge {
		return f.local.Charge(ctx, key, n, limits...)
	}
	return f.local.Take(ctx, key, n, limits...)
}

// takeShare decides a key the backend gave no answer for (that still
// holds) by the local store, admitting at most this instance's share,
// ⌊L/n⌋ (at least 1), of the binding limit's allowance L.
func (f *Store) takeShare(ctx context.Context, r *record, sh *recordShard, key string, n, owed int64, limits []store.Spec, charge, dry, hold bool, fleet, pending int64) (store.Result, error) {
	if dry || fleet > 1 || pending > 0 {
		// Over this instance's share, the request is refused uncharged.
		res, err := f.local.Peek(ctx, key, n, limits...)
		if err != nil || !res.Allowed || overShare(&res, fleet, pending) || dry {
			return res, err
		}
	}
	res, err := f.localTake(ctx, key, n, limits, charge)
	if err != nil || !res.Allowed || overShare(&res, fleet, pending) {
		return res, err
	}
	sh.mu.Lock()
	was := r.fellBack
	r.owe(owed, f.now())
	r.fellBack = was || hold
	sh.mu.Unlock()
	if owed > 0 {
		f.markOwed()
	}
	return res, nil
}

// overShare tells whether res, an admission by the local store, takes
// more than ⌊L/n⌋ (at least 1) of the binding limit's allowance L, with
// pending (Takes of the key on their way to the backend) counted as spent;
// if so it turns res into a refusal until the fallback has regained the
// excess, and otherwise caps res.Remaining at what is left of the share.
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

// instanceCount returns the number of processes sharing the backend, at
// least 1.
func (f *Store) instanceCount() int64 {
	if f.instances == nil {
		return 1
	}
	return max(int64(f.instances()), 1)
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

// Debts returns the number of keys whose local admissions are not yet
// charged to the backend, and how long the oldest has waited.
func (f *Store) Debts() (keys int, oldest time.Duration) {
	now := f.now()
	for i := range f.recs {
		sh := &f.recs[i]
		sh.mu.Lock()
		for _, r := range sh.m {
			if r.owed > 0 || len(r.unsure) > 0 {
				keys++
				oldest = max(oldest, now.Sub(r.owedSince))
			}
		}
		sh.mu.Unlock()
	}
	return keys, oldest
}
