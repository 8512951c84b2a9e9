package sloglimit

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/core"
)

// repeatKind classes the records New aggregates.
type repeatKind uint8

const (
	repeatNone     repeatKind = iota
	repeatStore               // the store failed: failed_open, failed_closed, fallback
	repeatKeyError            // the key function failed
	repeatDenied              // a denial (denied, shadow_denied), aggregated per client key
)

func (k repeatKind) String() string {
	switch k {
	case repeatStore:
		return "store_error"
	case repeatKeyError:
		return "key_error"
	case repeatDenied:
		return "denied"
	}
	return "none"
}

// repeatKindOf returns the kind of ev's record.
func repeatKindOf(ev core.Event) repeatKind {
	switch {
	case ev.Outcome == core.OutcomeFailedOpen || ev.Outcome == core.OutcomeFailedClosed || ev.Outcome == core.OutcomeFallback:
		return repeatStore
	case ev.KeyErr != nil || ev.Outcome == core.OutcomeKeyError:
		return repeatKeyError
	case ev.Outcome == core.OutcomeDenied || ev.Outcome == core.OutcomeShadowDenied:
		return repeatDenied
	}
	return repeatNone
}

// maxRepeatKeys bounds the client keys whose denials New aggregates
// apart, per observer; denials of further keys are aggregated together,
// per Limiter, until some of those keys have been quiet for an interval.
const maxRepeatKeys = 1024

type repeatKey struct {
	limiter string
	kind    repeatKind
	// key is the client key of a repeatDenied state, cut to
	// maxField bytes; others marks the state of the keys past
	// maxRepeatKeys.
	key    string
	others bool
}

// repeatState is what repeats knows of one limiter and kind (and key).
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

// repeats decides which records of a repeated kind New writes: the
// first of each limiter and kind (and client key, for denials), then one
// per interval. It is safe for concurrent use.
type repeats struct {
	every   time.Duration // ≤ 0: every record is written
	now     func() time.Time
	pending atomic.Int64 // records left out and not yet counted in a record
	// nextDue is when the earliest left-out records are due to be counted
	// (Unix µs); read without the lock, so that decisions do not scan
	// the states before then.
	nextDue   atomic.Int64
	mu        sync.Mutex
	states    map[repeatKey]*repeatState
	keys      int       // repeatDenied states of one key
	nextPrune time.Time // when a full table may be scanned again
}

func (r *repeats) clock() time.Time {
	if r.now != nil {
		return r.now()
	}
	return time.Now()
}

// admit reports whether a record of kind for limiter (and key, for
// repeatDenied), at level, is written now, and if so how many were left
// out before it.
func (r *repeats) admit(limiter string, kind repeatKind, key string, level slog.Level) (bool, int64) {
	if r.every <= 0 {
		return true, 0
	}
	now := r.clock()
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.state(repeatKey{limiter: limiter, kind: kind, key: key}, now)
	if st.next.IsZero() || !now.Before(st.next) {
		n := st.suppressed
		r.pending.Add(-n)
		*st = repeatState{next: now.Add(r.every)}
		return true, n
	}
	if st.suppressed == 0 || level > st.level {
		st.level = level
	}
	if st.suppressed == 0 && (r.pending.Load() == 0 || st.next.UnixMicro() < r.nextDue.Load()) {
		r.nextDue.Store(st.next.UnixMicro())
	}
	st.suppressed++
	r.pending.Add(1)
	return false, 0
}

// state returns the state of k, made if new; a new client key past
// maxRepeatKeys, once the table holds no quiet one to drop, gets its
// Limiter's state of other keys. r.mu is held.
func (r *repeats) state(k repeatKey, now time.Time) *repeatState {
	if st := r.states[k]; st != nil {
		return st
	}
	if r.states == nil {
		r.states = map[repeatKey]*repeatState{}
	}
	if k.kind == repeatDenied {
		if r.keys >= maxRepeatKeys && !now.Before(r.nextPrune) {
			r.prune(now)
			r.nextPrune = now.Add(r.every)
		}
		if r.keys >= maxRepeatKeys {
			k = repeatKey{limiter: k.limiter, kind: k.kind, others: true}
			if st := r.states[k]; st != nil {
				return st
			}
		} else {
			r.keys++
		}
	}
	st := &repeatState{}
	r.states[k] = st
	return st
}

// prune drops the states of client keys with nothing left out whose
// interval has passed: their next record is written at once anyway.
// r.mu is held.
func (r *repeats) prune(now time.Time) {
	for k, st := range r.states {
		if k.kind == repeatDenied && !k.others && st.suppressed == 0 && !now.Before(st.next) {
			delete(r.states, k)
			r.keys--
		}
	}
}

// due returns, and forgets, the left-out records whose interval has
// passed; their kinds' next record may be written one interval from now.
// It returns nothing, without taking the lock, before the earliest is due.
func (r *repeats) due() []repeatSummary {
	now := r.clock()
	if now.UnixMicro() < r.nextDue.Load() {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []repeatSummary
	next := int64(0)
	for k, st := range r.states {
		switch {
		case st.suppressed > 0 && !now.Before(st.next):
			out = append(out, repeatSummary{repeatKey: k, n: st.suppressed, level: st.level})
			r.pending.Add(-st.suppressed)
			*st = repeatState{next: now.Add(r.every)}
		case st.suppressed > 0 && (next == 0 || st.next.UnixMicro() < next):
			next = st.next.UnixMicro()
		}
	}
	r.nextDue.Store(next)
	return out
}
