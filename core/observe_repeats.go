package core

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// repeatKind classes the records LogDenials aggregates.
type repeatKind uint8

const (
	repeatNone     repeatKind = iota
	repeatStore               // the store failed: failed_open, failed_closed, fallback
	repeatKeyError            // the key function failed
)

func (k repeatKind) String() string {
	switch k {
	case repeatStore:
		return "store_error"
	case repeatKeyError:
		return "key_error"
	}
	return "none"
}

// repeatKindOf returns the kind of ev's record.
func repeatKindOf(ev Event) repeatKind {
	switch {
	case ev.Outcome == OutcomeFailedOpen || ev.Outcome == OutcomeFailedClosed || ev.Outcome == OutcomeFallback:
		return repeatStore
	case ev.KeyErr != nil || ev.Outcome == OutcomeKeyError:
		return repeatKeyError
	}
	return repeatNone
}

type repeatKey struct {
	limiter string
	kind    repeatKind
}

// repeatState is what repeats knows of one limiter and kind.
type repeatState struct {
	next       time.Time  // when the next record may be written
	suppressed int64      // records left out since the last one written
	level      slog.Level // the highest level among them
}

// repeatSummary reports records left out for one limiter and kind.
type repeatSummary struct {
	repeatKey
	n     int64
	level slog.Level
}

// repeats decides which records of a repeated kind LogDenials writes: the
// first of each limiter and kind, then one per interval. It is safe for
// concurrent use.
type repeats struct {
	every   time.Duration // ≤ 0: every record is written
	now     func() time.Time
	pending atomic.Int64 // records left out and not yet counted in a record
	mu      sync.Mutex
	states  map[repeatKey]*repeatState
}

func (r *repeats) clock() time.Time {
	if r.now != nil {
		return r.now()
	}
	return time.Now()
}

// admit reports whether a record of kind for limiter, at level, is written
// now, and if so how many were left out before it.
func (r *repeats) admit(limiter string, kind repeatKind, level slog.Level) (bool, int64) {
	if r.every <= 0 {
		return true, 0
	}
	now := r.clock()
	r.mu.Lock()
	defer r.mu.Unlock()
	k := repeatKey{limiter: limiter, kind: kind}
	st := r.states[k]
	if st == nil {
		if r.states == nil {
			r.states = map[repeatKey]*repeatState{}
		}
		st = &repeatState{}
		r.states[k] = st
	}
	if st.next.IsZero() || !now.Before(st.next) {
		n := st.suppressed
		r.pending.Add(-n)
		*st = repeatState{next: now.Add(r.every)}
		return true, n
	}
	if st.suppressed == 0 || level > st.level {
		st.level = level
	}
	st.suppressed++
	r.pending.Add(1)
	return false, 0
}

// due returns, and forgets, the left-out records whose interval has
// passed; their kinds' next record may be written one interval from now.
func (r *repeats) due() []repeatSummary {
	now := r.clock()
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []repeatSummary
	for k, st := range r.states {
		if st.suppressed > 0 && !now.Before(st.next) {
			out = append(out, repeatSummary{repeatKey: k, n: st.suppressed, level: st.level})
			r.pending.Add(-st.suppressed)
			*st = repeatState{next: now.Add(r.every)}
		}
	}
	return out
}
