package memorystore

import (
	"context"
	"time"

	"github.com/sluicehq/sluice/core/store"
)

// maxInFlightRetry is the longest retry (µs) of a request an InFlight
// limit refuses (see time.Second).
const maxInFlightRetry = int64(time.Second / time.Microsecond)

// hold is one taken slot of an InFlight limit: its id and the instant (µs)
// from which it is free even if never released.
type hold struct{ id, expires int64 }

// holds are the slots of an InFlight state, in no order, expired ones
// possibly among them (dropped when the state is next charged).
type holds []hold

// live returns the number of slots taken at now and the earliest and
// latest expiry among them (0 when there is none).
func (h holds) live(now int64) (c, earliest, latest int64) {
	for _, x := range h {
		if x.expires > now {
			c++
			if earliest == 0 || x.expires < earliest {
				earliest = x.expires
			}
			latest = max(latest, x.expires)
		}
	}
	return c, earliest, latest
}

func (h holds) has(id int64) bool {
	for _, x := range h {
		if x.id == id {
			return true
		}
	}
	return false
}

// evalInFlight decides a cost n at now: any n ≥ 1 takes one slot while
// fewer than Rate are live; n == 0 peeks (ALGORITHMS.md, InFlight).
func evalInFlight(o *outcome, sp *algSpec, st *memoryState, now, n int64) {
	var c, earliest, latest int64
	if st.has {
		c, earliest, latest = st.slots.live(now)
	}
	o.limit = sp.rate
	switch {
	case n == 0:
		o.allowed = true
	case c < sp.rate:
		o.allowed = true
		c++
		latest = now + sp.period
		o.expires = latest
	default:
		o.retry = min(maxInFlightRetry, earliest-now)
	}
	o.remain = sp.rate - c
	if c > 0 {
		o.reset = latest - now
	}
}

// applyInFlight writes an allowed, charged outcome's slot, o.slot, into st
// and drops the slots expired at now.
func applyInFlight(st *memoryState, o *outcome, sp *algSpec, now int64) {
	if !st.has {
		st.slots = st.slots[:0]
	}
	kept := st.slots[:0]
	for _, x := range st.slots {
		if x.expires > now {
			kept = append(kept, x)
		}
	}
	st.slots = append(kept, hold{id: o.slot, expires: now + sp.period})
}

// pickSlot gives every InFlight limit of an allowed, charged call the id
// of its new slot: the first id from now on (at least 1) that none of
// their states holds, so that one id names the slot in all of them.
// The caller holds the shard's lock.
func pickSlot(evs []limitEval, now int64) {
	id, found := max(now, 1), false
	for again := true; again; {
		again = false
		for i := range evs {
			e := &evs[i]
			if e.sp.alg != algInFlight {
				continue
			}
			found = true
			if e.st != nil && e.st.has && e.st.slots.has(id) {
				id++
				again = true
			}
		}
	}
	if !found {
		return
	}
	for i := range evs {
		if evs[i].sp.alg == algInFlight {
			evs[i].o.slot = id
		}
	}
}

// Release frees slot (a Result.Slot of key) in each InFlight limit of
// limits; other limits, and a slot that is not taken, are ignored. It fails
// like Take for a bad key or limit.
func (s *Store) Release(ctx context.Context, key string, slot int64, limits ...store.Spec) error {
	if err := s.checkInput(ctx, key, 0, limits); err != nil {
		return err
	}
	evs := make([]limitEval, len(limits))
	if err := specsOf(limits, evs); err != nil {
		return err
	}
	key, digest := storedKey(key)
	sh, h := s.shardOf(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	for i := range evs {
		if evs[i].sp.alg != algInFlight {
			continue
		}
		if st, ok := sh.find(h, key, digest, &evs[i].sp); ok {
			st.slots.release(slot)
		}
	}
	return nil
}

// release removes the slot id, if held.
func (h *holds) release(id int64) {
	for i, x := range *h {
		if x.id == id {
			last := len(*h) - 1
			(*h)[i] = (*h)[last]
			*h = (*h)[:last]
			return
		}
	}
}
