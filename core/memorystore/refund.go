package memorystore

import (
	"context"

	"github.com/sluicehq/sluice/core/store"
)

// Charge is Take, and sets the Result's Stamp to the store's clock at the
// decision, for Refund.
func (s *Store) Charge(ctx context.Context, key string, n int64, limits ...store.Spec) (store.Result, error) {
	var res store.Result
	err := s.take(ctx, &res, key, n, limits, true)
	return res, err
}

// Refund gives back n units that an allowed Charge of key over limits
// made at stamp took, with the give-back of ALGORITHMS.md ("Giving back a
// charge"), limit by limit, at one instant. A state that has expired, or
// the units of a window or a log entry that has passed, get nothing back.
// It never sets nor lifts a penalty lock. It fails like Take for bad input
// and otherwise never fails.
func (s *Store) Refund(ctx context.Context, key string, n int64, stamp int64, limits ...store.Spec) error {
	if err := s.checkInput(ctx, key, n, limits); err != nil {
		return err
	}
	evs := make([]limitEval, len(limits))
	if err := specsOf(limits, evs); err != nil {
		return err
	}
	key, digest := storedKey(key)
	sh := s.shardOf(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	now := s.now().UnixMicro()
	for i := range evs {
		e := &evs[i]
		dup := false
		for j := 0; j < i; j++ {
			dup = dup || evs[j].sp.sameState(&e.sp)
		}
		st, ok := sh.find(key, digest, &e.sp)
		if !ok || dup || !st.has || now >= st.expires || n == 0 {
			continue
		}
		giveBack(st, &e.sp, now, n, stamp)
	}
	return nil
}

// giveBack gives n units back to st, a live state, at now, for a charge
// made at stamp.
func giveBack(st *memoryState, sp *algSpec, now, n, stamp int64) {
	switch sp.alg {
	case algGCRA, algLeakyBucket:
		lim := sp.burst // n ≤ lim: so that n·T cannot overflow, as in Redis
		if sp.alg == algLeakyBucket {
			lim++
		}
		n = min(n, lim)
		if tat := st.words.tat().tat; tat > now {
			st.words = tatState{tat: max(now, tat-n*sp.interval)}.words()
		}
	case algTokenBucket:
		capacity := sp.burst * sp.period
		tok := refilled(sp, st.words.bucket(), now)
		n = min(n, sp.burst)
		st.words = bucketState{tokens: min(capacity, tok+n*sp.period), ts: now}.words()
	case algFixedWindow:
		w, _ := sp.window(now)
		wc, _ := sp.window(stamp)
		if ws := st.words.window(); ws.window == w && wc == w {
			ws.count = max(0, ws.count-n)
			st.words = ws.words()
		}
	case algSlidingWindow:
		w, wc := floorDiv(now, sp.period), floorDiv(stamp, sp.period)
		ws := st.words.window()
		switch {
		case wc != w && wc != w-1:
		case ws.window == wc:
			ws.count = max(0, ws.count-n)
		case ws.window == wc+1:
			ws.prev = max(0, ws.prev-n)
		}
		st.words = ws.words()
	case algSlidingLog:
		if stamp > now-sp.period && st.log != nil {
			st.log.remove(stamp, n, now-sp.period)
		}
	}
}

// remove takes out up to n units of the entries of the oldest stamp at or
// after stamp, when that stamp is after cut (live): the units a request
// charged at stamp wrote (ALGORITHMS.md), taken from the last entries of
// that stamp. The entries from there on are renumbered so that units stay
// consecutive; an entry left without units goes.
func (l *slidingLog) remove(stamp, n, cut int64) {
	i := l.firstAfter(max(stamp, cut+1) - 1)
	if i >= l.count {
		return
	}
	type span struct{ stamp, units int64 }
	rest := make([]span, l.count-i)
	for e := range rest {
		end := l.next
		if i+e+1 < l.count {
			end = l.at(i + e + 1).first
		}
		rest[e] = span{l.at(i + e).stamp, end - l.at(i+e).first}
	}
	j := 0 // the entries of the oldest stamp
	for j < len(rest) && rest[j].stamp == rest[0].stamp {
		j++
	}
	for e := j - 1; e >= 0 && n > 0; e-- {
		d := min(n, rest[e].units)
		rest[e].units -= d
		n -= d
	}
	next, k := l.at(i).first, i
	for _, e := range rest {
		if e.units > 0 {
			p := l.pos(k)
			l.buf[p/logBlock][p%logBlock] = logEntry{stamp: e.stamp, first: next}
			next += e.units
			k++
		}
	}
	l.count, l.next = k, next
	if l.count > 0 {
		l.first, l.last = l.at(0).stamp, l.at(l.count-1).stamp
	}
}
