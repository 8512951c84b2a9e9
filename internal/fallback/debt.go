package fallback

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/core/store"
)

// What the fallback admits while the backend is away is owed to it: the
// first Take of the key after it is back carries it (begin, after), and a
// background pass (settle) charges the rest once the backend answers
// again; meanwhile the keys the fallback admitted are held (settleHold).

// settleHold is how long after the backend answers again, having failed,
// the keys the fallback admitted are still decided by it (within its
// share) while its debts are charged: time for the other instances, whose
// probes find the backend back at about the same moment, to charge
// theirs, so that no instance admits through the backend what another
// instance's fallback already admitted. The hold lasts while the debts
// this instance made while the backend was away are charged (the first
// settle after its answer), and settleHold after. A lone instance does
// not hold. Until the backend answers, one Take per such key at a time is
// sent to it (the key's debt rides along), the others are decided by the
// fallback.
const settleHold = 200 * time.Millisecond

// SettleHold is settleHold, for Config.Hold.
const SettleHold = settleHold

// ticket is what begin noted of a Take for after to settle.
type ticket struct {
	owed    int64 // the key's debt, carried by the Take
	pending int64 // added to the key's pending
	hold    bool  // not to be sent: the fallback decides the key (settleHold)
}

// begin notes a Take of cost for key about to be sent to the backend: it
// claims what the fallback owes the backend for key, for the Take to carry
// (so that the backend admits nothing of what the fallback already
// admitted), and counts the Take as pending until after: a decision the
// fallback makes meanwhile leaves room for it. A key without a remembered
// answer is not tracked.
func (f *Store) begin(key string, cost int64) ticket {
	sh := f.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	var t ticket
	r := sh.m[key]
	if r == nil {
		return t
	}
	if r.charging { // its debt is on its way to the backend (settleKey)
		return ticket{hold: true}
	}
	if r.fellBack {
		switch hu := f.holdUntil.Load(); {
		case f.instanceCount() == 1:
			r.fellBack = false // no other instance's debt to wait for
		case hu == 0 && !r.scouting:
			r.scouting = true // the key's one Take until the backend answers
		case hu == 0 || f.now().UnixNano() < hu || f.recovering.Load():
			return ticket{hold: true}
		default:
			r.fellBack = false // the hold is over
		}
	}
	if f.owed.Load() || f.flushing.Load() {
		t.owed = r.due(f.now())
	}
	t.pending = cost + t.owed
	r.pending += t.pending
	return t
}

// after settles t, the ticket of a Take of key that ended with res or
// err: an answer is remembered, a failure ends the Take's pending, and a
// debt the backend did not take is owed again (failed before it could
// run) or charged apart (refused).
func (f *Store) after(key string, t ticket, res *store.Result, err error, limits []store.Spec) {
	if err == nil {
		f.remember(key, res, limits, t)
	} else {
		if !lostConnection(err) {
			f.holdUntil.Store(0) // a hold starts when the backend answers again
		}
		sh := f.shard(key)
		sh.mu.Lock()
		if r := sh.m[key]; r != nil {
			r.pending = max(r.pending-t.pending, 0)
			r.scouting = false
		}
		sh.mu.Unlock()
	}
	switch {
	case t.owed == 0:
	case err != nil && errors.As(err, new(*Uncertain)):
		// The call may have charged the debt: it is settled (decide).
	case err != nil:
		sh := f.shard(key)
		sh.mu.Lock()
		r := sh.record(key)
		if r.owed == 0 {
			r.owedSince = f.now()
		}
		r.owed += t.owed // until the owedUntil it had
		sh.mu.Unlock()
		f.markOwed()
	case !res.Allowed:
		d := &debt{key, t.owed, limits}
		f.settling.Add(1)
		go func() {
			defer f.settling.Done()
			f.settleOne(d)
		}()
	}
}

// answered notes that the backend answered a Take: a hold starts if none
// has since the last failure, and what the fallback owes is charged.
func (f *Store) answered() {
	if f.holdUntil.Load() == 0 && f.holdUntil.CompareAndSwap(0, f.now().Add(f.hold).UnixNano()) &&
		(f.owed.Load() || f.flushing.Load()) {
		f.recovering.Store(true)
	}
	f.Settle()
}

// Settle starts the background pass that charges the backend with what
// the fallback admitted while it was away, unless one runs or nothing is
// owed. The Redis store calls it when a circuit breaker closes; every
// answer of the backend does too.
func (f *Store) Settle() {
	if f.owed.Load() && f.flushing.CompareAndSwap(false, true) {
		f.settling.Add(1)
		go func() {
			defer f.settling.Done()
			f.settle()
		}()
	}
}

// settleRetry is how long after a debt is made, or a look found the
// backend away, the fallback looks again (a Peek of an owed key, which
// changes nothing however late it runs): when the backend answers, the
// pass starts, so that debts reach the backend within about settleRetry
// of its answering even when no request and no breaker's probe does.
const settleRetry = time.Second

// markOwed notes that the fallback owes the backend, and has it look for
// the backend within settleRetry.
func (f *Store) markOwed() {
	f.owed.Store(true)
	f.retryMu.Lock()
	defer f.retryMu.Unlock()
	if f.closed || f.retry != nil {
		return
	}
	f.settling.Add(1)
	f.retry = time.AfterFunc(settleRetry, func() {
		defer f.settling.Done()
		f.retryMu.Lock()
		f.retry = nil
		f.retryMu.Unlock()
		switch {
		case !f.owed.Load():
		case f.backendAnswers():
			f.answered()
		default:
			f.markOwed()
		}
	})
}

// backendAnswers reports whether the backend answers a Peek of a key the
// fallback owes it for.
func (f *Store) backendAnswers() bool {
	var key string
	var limits []store.Spec
	for i := range f.recs {
		sh := &f.recs[i]
		sh.mu.Lock()
		for k, r := range sh.m {
			if (r.owed > 0 || len(r.unsure) > 0) && len(r.limits) > 0 {
				key, limits = k, r.limits
				break
			}
		}
		sh.mu.Unlock()
		if key != "" {
			break
		}
	}
	if key == "" {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
	defer cancel()
	_, err := f.backend.Peek(ctx, key, 0, limits...)
	return err == nil
}

// debt is what the fallback admitted for key, to be charged to the backend.
type debt struct {
	key    string
	n      int64
	limits []store.Spec
}

// settleWorkers is how many keys settle charges at a time.
const settleWorkers = 16

// settleTimeout bounds each call settle makes to the backend.
const settleTimeout = time.Second

// settle charges the backend with what the fallback admitted while it was
// away, so that a key's admissions in all stay within about one
// allowance. It charges settleWorkers keys at a time, and ends when
// everything is charged; what the backend fails to take stays owed, for
// the next answer.
func (f *Store) settle() {
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
			if r.owed > 0 || len(r.unsure) > 0 {
				keys = append(keys, k)
			}
		}
		sh.mu.Unlock()
	}
	var failed atomic.Bool // the backend failed: the rest waits for its next answer
	work := make(chan string)
	var wg sync.WaitGroup
	for range min(settleWorkers, len(keys)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range work {
				if !failed.Load() && !f.settleKey(k) {
					failed.Store(true)
					f.markOwed()
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

// settleKey settles key's calls whose reply was lost, then charges what
// key owes, and reports whether the backend took it. Takes of the key
// hold meanwhile (begin), so that none carries the debt being charged.
func (f *Store) settleKey(key string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
	defer cancel()
	if !f.settleUnsure(ctx, key) {
		return false
	}
	sh := f.shard(key)
	sh.mu.Lock()
	r := sh.m[key]
	var d debt
	if r != nil && r.owed > 0 && f.now().Before(r.owedUntil) && !r.charging {
		d = debt{key, r.owed, r.limits}
		r.charging = true
	} else if r != nil && !r.charging {
		r.owed = 0
	}
	sh.mu.Unlock()
	if d.n == 0 {
		return true
	}
	err := f.charge(&d)
	sh.mu.Lock()
	r.charging = false
	if err == nil {
		r.owed = max(r.owed-d.n, 0)
	}
	sh.mu.Unlock()
	return err == nil
}

// extendHold makes a hold under way last settleHold past now: settle has
// charged this instance's debts, and the other instances are given as
// long again to charge theirs.
func (f *Store) extendHold() {
	until := f.now().Add(f.hold).UnixNano()
	for {
		hu := f.holdUntil.Load()
		if hu == 0 || hu >= until || f.holdUntil.CompareAndSwap(hu, until) {
			return
		}
	}
}

// settleOne charges d to the backend, or owes it again if it fails.
func (f *Store) settleOne(d *debt) {
	if f.charge(d) == nil {
		return
	}
	sh := f.shard(d.key)
	sh.mu.Lock()
	if r := sh.m[d.key]; r != nil {
		if r.owed == 0 {
			r.owedSince = f.now()
		}
		r.owed += d.n
	}
	sh.mu.Unlock()
	f.markOwed()
}

// charge charges d to the backend: all of it when it fits, otherwise what
// is left of the key's allowance, so that the charge is never refused
// (nor sets a penalty lock). A charge whose reply is lost is settled
// later (unsureOf), or, when it cannot be, taken as made: either way d is
// no longer owed as such.
func (f *Store) charge(d *debt) error {
	limits := withoutInFlight(d.limits)
	if len(limits) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
	defer cancel()
	res, err := f.backend.Peek(ctx, d.key, d.n, limits...)
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
	_, err = f.backend.Take(ctx, d.key, n, limits...)
	var u *Uncertain
	if errors.As(err, &u) {
		f.unsureOf(d.key, limits, u, n)
		return nil
	}
	return err
}

// withoutInFlight returns limits without their InFlight ones: a debt is
// charged by no request, so a slot it took would never be released.
func withoutInFlight(limits []store.Spec) []store.Spec {
	for i := range limits {
		if limits[i].Algorithm() == store.InFlight {
			out := make([]store.Spec, 0, len(limits)-1)
			for _, s := range limits {
				if s.Algorithm() != store.InFlight {
					out = append(out, s)
				}
			}
			return out
		}
	}
	return limits
}

// owe adds n to what r's key owes the backend, until the longest horizon
// of its limits from now: past it, the admissions no longer count against
// any limit, and charging them would refuse what the limits allow.
func (r *record) owe(n int64, now time.Time) {
	r.fellBack = true
	var h int64
	for i := range r.limits {
		h = max(h, r.limits[i].Horizon())
	}
	if r.owed == 0 {
		r.owedSince = now
	}
	r.owed += n
	h = min(h, int64(100*365*24*time.Hour/time.Microsecond)) // no overflow below
	r.owedUntil = now.Add(time.Duration(h) * time.Microsecond)
}

// due returns what r's key owes the backend now, and owes nothing after.
func (r *record) due(now time.Time) int64 {
	n := r.owed
	r.owed = 0
	if now.After(r.owedUntil) {
		return 0
	}
	return n
}
