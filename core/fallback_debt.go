package core

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/core/store"
)

// What the local fallback admits while the store is away is owed to the
// store: a Take of the key carries it (begin, after), or a background pass
// charges it (settle) once the store answers again; meanwhile the keys it
// admitted are held (settleHold). See ALGORITHMS.md, "While the store is
// away".

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
// answer), and settleHold after. A lone instance does not hold. Until
// the store answers, one Take per such key at a time is sent to it (the
// key's debt rides along), the others are decided by the fallback.
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
	var t ticket
	r := sh.m[key]
	if r == nil {
		return t
	}
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
func (f *localFallback) after(key string, t ticket, res *store.Result, err error, cfg *limiterConfig, now time.Time) {
	if err == nil {
		f.remember(key, res, cfg, now, t)
	} else {
		f.holdUntil.Store(0) // a hold starts when the store answers again
		sh := f.shard(key)
		sh.mu.Lock()
		if r := sh.m[key]; r != nil {
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
		if take[i].Algorithm() == store.InFlight {
			out := make([]store.Spec, 0, len(take)-1)
			for _, s := range take {
				if s.Algorithm() != store.InFlight {
					out = append(out, s)
				}
			}
			return out
		}
	}
	return take
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
