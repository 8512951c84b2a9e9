package memorystore

import (
	"math"
	"time"

	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/internal/arith"
)

// This file holds the memory store's arithmetic, transcribing ALGORITHMS.md
// with int64 microseconds: per algorithm, its evaluation and, after it, its
// give-back. An evaluation only reads the state it is given; Take writes
// the outcome back once it knows the whole call is charged.

// infMicros is the retry of a cost that can never pass (INF in
// ALGORITHMS.md).
const infMicros = math.MaxInt64

// algCode is the compact form of a Algorithm kept in the store's map keys.
type algCode uint8

const (
	algGCRA algCode = iota
	algLeakyBucket
	algTokenBucket
	algFixedWindow
	algSlidingWindow
	algSlidingLog
	algInFlight
)

func algCodeOf(a store.Algorithm) algCode {
	switch a {
	case store.TokenBucket:
		return algTokenBucket
	case store.FixedWindow:
		return algFixedWindow
	case store.SlidingWindow:
		return algSlidingWindow
	case store.SlidingLog:
		return algSlidingLog
	case store.LeakyBucket:
		return algLeakyBucket
	case store.InFlight:
		return algInFlight
	default: // GCRA; Spec has already rejected unknown algorithms
		return algGCRA
	}
}

// algSpec is a validated limit as the arithmetic uses it.
type algSpec struct {
	alg      algCode
	cal      calUnit // a calendar window's unit (store.PerCalendar), else calNone
	rate     int64   // R
	period   int64   // P, µs
	burst    int64   // B after defaults
	penalty  int64   // L, µs
	interval int64   // T = ceil(P/R), µs (GCRA and LeakyBucket)
	// A calendar window's zone: a FixedWindow whose windows are its days,
	// weeks or months; nil otherwise.
	zone *time.Location
}

// calUnit is a calendar window's unit.
type calUnit uint8

const (
	calNone calUnit = iota
	calDay
	calWeek
	calMonth
)

var calUnits = [...]string{calDay: "day", calWeek: "week", calMonth: "month"}

func calUnitOf(unit string) calUnit {
	for u, name := range calUnits {
		if name == unit && name != "" {
			return calUnit(u)
		}
	}
	return calNone // Spec has already rejected unknown units
}

// window returns the fixed window of sp holding now: its number (a
// calendar window's start in µs, else floor(now/P)) and its end in µs.
func (sp *algSpec) window(now int64) (w, end int64) {
	if sp.cal != calNone {
		return arith.CalendarWindow(calUnits[sp.cal], sp.zone, now)
	}
	w = floorDiv(now, sp.period)
	return w, (w + 1) * sp.period
}

// memoryState is one (key, limit) entry of the  has is false when
// only a penalty lock is stored (the algorithm state is absent). expires is
// the instant (µs) from which the entry behaves exactly like no entry: the
// state's ttl per ALGORITHMS.md, or the end of the lock when that is later.
type memoryState struct {
	key       stateKey   // what it is stored under (see memoryShard)
	words     stateWords // the algorithm state, but SlidingLog's
	lockUntil int64
	expires   int64
	log       *slidingLog // SlidingLog's requests
	slots     holds       // InFlight's taken slots
	has       bool
	locked    bool
	ns        uint8          // the index of its namespace in its shard's spaces
	zone      *time.Location // a calendar window's zone (stateKey holds its name)
}

// stateWords holds an entry's algorithm state in three integers, which each
// algorithm names through its own type: tatState, bucketState or
// windowState. Only their conversions below read or write the words. (A
// struct, not an array: the compiler keeps a small struct in registers.)
type stateWords struct{ w0, w1, w2 int64 }

// tatState is the state of GCRA and LeakyBucket: the theoretical arrival
// time (µs).
type tatState struct{ tat int64 }

// bucketState is TokenBucket's: the tokens, scaled by the Period, as
// counted at ts (µs).
type bucketState struct{ tokens, ts int64 }

// windowState is FixedWindow's and SlidingWindow's: the current window's
// number (floor(now/Period); a calendar window's start in µs), its count
// and, for SlidingWindow, the previous window's count.
type windowState struct{ window, count, prev int64 }

func (w *stateWords) tat() tatState       { return tatState{tat: w.w0} }
func (w *stateWords) bucket() bucketState { return bucketState{tokens: w.w0, ts: w.w1} }
func (w *stateWords) window() windowState { return windowState{window: w.w0, count: w.w1, prev: w.w2} }

func (s tatState) words() stateWords    { return stateWords{w0: s.tat} }
func (s bucketState) words() stateWords { return stateWords{w0: s.tokens, w1: s.ts} }
func (s windowState) words() stateWords { return stateWords{w0: s.window, w1: s.count, w2: s.prev} }

// outcome is one limit's evaluation: the figures of ALGORITHMS.md in µs
// and, when allowed, the state to write if the call is charged.
type outcome struct {
	allowed bool
	byLock  bool // denied because a penalty lock is active: nothing to write
	limit   int64
	remain  int64
	retry   int64 // infMicros: never
	reset   int64
	delay   int64

	// The state to write when the call is charged (allowed and n > 0).
	next    stateWords
	expires int64
	// SlidingLog: entries before logStart are outside the window; the new
	// entry of n units is stamped logStamp.
	logStart int
	logStamp int64
	// InFlight: the id of the slot to take (see pickSlot).
	slot int64
}

// evaluate fills o with the decision of one limit for a cost n at now
// against state st, penalty lock included.
func evaluate(o *outcome, sp *algSpec, st *memoryState, now, n int64) {
	if st.locked && now < st.lockUntil {
		evaluateAlgorithm(o, sp, st, now, 0)
		left := st.lockUntil - now
		o.allowed, o.byLock = false, true
		o.retry, o.remain, o.delay = left, 0, 0
		o.reset = max(o.reset, left)
		return
	}
	evaluateAlgorithm(o, sp, st, now, n)
	if !o.allowed && sp.penalty > 0 {
		if o.retry != infMicros {
			o.retry = max(o.retry, sp.penalty)
		}
		o.reset = max(o.reset, sp.penalty)
	}
}

func evaluateAlgorithm(o *outcome, sp *algSpec, st *memoryState, now, n int64) {
	*o = outcome{}
	switch sp.alg {
	case algGCRA:
		evalGCRA(o, sp, st, now, n, false)
	case algLeakyBucket:
		evalGCRA(o, sp, st, now, n, true)
	case algTokenBucket:
		evalTokenBucket(o, sp, st, now, n)
	case algFixedWindow:
		evalFixedWindow(o, sp, st, now, n)
	case algSlidingWindow:
		evalSlidingWindow(o, sp, st, now, n)
	case algSlidingLog:
		evalSlidingLog(o, sp, st, now, n)
	case algInFlight:
		evalInFlight(o, sp, st, now, n)
	}
}

// gives holds each algorithm's give-back (Refund), which follows its
// evaluation below; InFlight has none (Release).
var gives = [algInFlight + 1]func(st *memoryState, sp *algSpec, now, n, stamp int64){algGCRA: giveGCRA,
	algLeakyBucket: giveGCRA, algTokenBucket: giveTokenBucket, algFixedWindow: giveFixedWindow,
	algSlidingWindow: giveSlidingWindow, algSlidingLog: giveSlidingLog}

// evalGCRA is GCRA and, with leaky set, LeakyBucket (GCRA with capacity
// B+1 whose admitted requests are delayed until their emission slot).
func evalGCRA(o *outcome, sp *algSpec, st *memoryState, now, n int64, leaky bool) {
	t := sp.interval
	limit := sp.burst
	if leaky {
		limit++
	}
	dvt := limit * t // validated below 2^53
	o.limit = limit
	base := now
	if tat := st.words.tat().tat; st.has && tat > now {
		base = tat
	}
	used := base - now
	switch {
	case n > limit: // checked before n·T so a huge n cannot overflow
		o.retry = infMicros
	case base+n*t-now > dvt:
		o.retry = base + n*t - now - dvt
	default:
		newTat := base + n*t
		o.allowed = true
		used = newTat - now
		if leaky && n > 0 {
			o.delay = newTat - t - now
		}
		o.next, o.expires = tatState{tat: newTat}.words(), newTat
	}
	o.reset = used
	if dvt >= used {
		o.remain = (dvt - used) / t
	}
}

// giveGCRA is evalGCRA's give-back, LeakyBucket's too.
func giveGCRA(st *memoryState, sp *algSpec, now, n, _ int64) {
	lim := sp.burst // n ≤ lim: so that n·T cannot overflow, as in Redis
	if sp.alg == algLeakyBucket {
		lim++
	}
	n = min(n, lim)
	if tat := st.words.tat().tat; tat > now {
		st.words = tatState{tat: max(now, tat-n*sp.interval)}.words()
	}
}

func evalTokenBucket(o *outcome, sp *algSpec, st *memoryState, now, n int64) {
	r, p := sp.rate, sp.period
	capacity := sp.burst * p
	tok := capacity
	if st.has {
		tok = refilled(sp, st.words.bucket(), now)
	}
	o.limit = sp.burst
	switch {
	case n > sp.burst:
		o.retry = infMicros
	case tok >= n*p:
		tok -= n * p
		o.allowed = true
		o.next = bucketState{tokens: tok, ts: now}.words()
	default:
		o.retry = arith.CeilDiv(n*p-tok, r)
	}
	o.remain = tok / p
	o.reset = arith.CeilDiv(capacity-tok, r)
	if o.allowed {
		o.expires = now + o.reset
	}
}

// refilled is a token bucket's tokens, scaled by P, refilled to now from
// its state b.
func refilled(sp *algSpec, b bucketState, now int64) int64 {
	capacity := sp.burst * sp.period
	need := capacity - b.tokens
	if elapsed := max(0, now-b.ts); need > 0 && elapsed < arith.CeilDiv(need, sp.rate) {
		return b.tokens + sp.rate*elapsed // < need, so no overflow
	}
	return capacity
}

func giveTokenBucket(st *memoryState, sp *algSpec, now, n, _ int64) {
	capacity := sp.burst * sp.period
	tok := refilled(sp, st.words.bucket(), now)
	n = min(n, sp.burst)
	st.words = bucketState{tokens: min(capacity, tok+n*sp.period), ts: now}.words()
}

func evalFixedWindow(o *outcome, sp *algSpec, st *memoryState, now, n int64) {
	r := sp.rate
	w, end := sp.window(now)
	var c int64
	if ws := st.words.window(); st.has && ws.window == w {
		c = ws.count
	}
	o.limit = r
	switch {
	case n > r:
		o.retry = infMicros
	case c+n <= r:
		c += n
		o.allowed = true
		o.next, o.expires = windowState{window: w, count: c}.words(), end
	default:
		o.retry = end - now
	}
	o.remain = r - c
	if c > 0 {
		o.reset = end - now
	}
}

func giveFixedWindow(st *memoryState, sp *algSpec, now, n, stamp int64) {
	w, _ := sp.window(now)
	wc, _ := sp.window(stamp)
	if ws := st.words.window(); ws.window == w && wc == w {
		ws.count = max(0, ws.count-n)
		st.words = ws.words()
	}
}

func evalSlidingWindow(o *outcome, sp *algSpec, st *memoryState, now, n int64) {
	r, p := sp.rate, sp.period
	w := floorDiv(now, p)
	e := now - w*p
	var c, prev int64
	if ws := st.words.window(); st.has {
		switch ws.window {
		case w:
			c, prev = ws.count, ws.prev
		case w - 1:
			prev = ws.count
		}
	}
	o.limit = r
	switch {
	case n > r:
		o.retry = infMicros
	case prev*(p-e)+(c+n)*p <= r*p: // at most 3·R·P, validated below 2^53
		c += n
		o.allowed = true
		o.next = windowState{window: w, count: c, prev: prev}.words()
		o.expires = (w + 2) * p
	default:
		o.retry = arith.SlidingWindowRetry(r, p, e, c, prev, n)
	}
	if left := r*p - prev*(p-e) - c*p; left > 0 {
		o.remain = left / p
	}
	switch {
	case c > 0:
		o.reset = 2*p - e
	case prev > 0:
		o.reset = p - e
	}
}

func giveSlidingWindow(st *memoryState, sp *algSpec, now, n, stamp int64) {
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
}

func evalSlidingLog(o *outcome, sp *algSpec, st *memoryState, now, n int64) {
	r, p := sp.rate, sp.period
	var lg *slidingLog
	if st.has {
		lg = st.log
	}
	start := lg.firstAfter(now - p)
	c := lg.units(start)
	var newest int64
	if c > 0 {
		newest = lg.last
	}
	o.limit = r
	switch {
	case n > r:
		o.retry = infMicros
	case c+n <= r:
		o.allowed = true
		if n > 0 {
			stamp := max(now, newest) // with c == 0 every old entry is before now
			c += n
			newest = stamp
			o.logStart, o.logStamp = start, stamp
			o.expires = stamp + p
		}
	default:
		o.retry = lg.stampOf(start, c+n-r-1) + p - now
	}
	o.remain = r - c
	if c > 0 {
		o.reset = newest + p - now
	}
}

func giveSlidingLog(st *memoryState, sp *algSpec, now, n, stamp int64) {
	if stamp > now-sp.period && st.log != nil {
		st.log.remove(stamp, n, now-sp.period)
	}
}

// apply writes the state of an allowed, charged outcome at now into st.
func apply(st *memoryState, o *outcome, sp *algSpec, n, now int64) {
	switch sp.alg {
	case algInFlight:
		applyInFlight(st, o, sp, now)
	case algSlidingLog:
		if st.log == nil {
			st.log = &slidingLog{}
		}
		if !st.has {
			st.log.reset()
		}
		st.log.commit(o.logStart, n, o.logStamp, sp.rate)
	default:
		st.words = o.next
	}
	st.has = true
	st.expires = o.expires
	if st.locked && st.lockUntil > st.expires {
		st.expires = st.lockUntil
	}
}

// lock sets the penalty lock of a limit that denied at now.
func lock(st *memoryState, sp *algSpec, now int64) {
	st.locked = true
	st.lockUntil = now + sp.penalty
	if !st.has || st.expires < st.lockUntil {
		st.expires = st.lockUntil
	}
}

// floorDiv is floor(a/b) for b > 0 and any a (a clock before 1970 stays
// consistent).
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b < 0 {
		q--
	}
	return q
}
