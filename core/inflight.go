package core

import (
	"context"
	"time"
)

// releaseStep is what Decision.Done does for a request that took an
// InFlight slot (see MaxInFlight): give the slot back.
type releaseStep struct {
	lim      *Limiter
	storeKey string
	slot     int64
	ev       Event // the decision's Event before observe, for a failed release
}

// releaseSlot gives back the request's InFlight slot, if it took one, in
// the store that took it, within the Limiter's per-decision timeout and
// whatever the request's context; a failure is reported to observers
// (OutcomeGiveBackFailed), and the slot is then free at the end of its
// hold.
func (d Decision) releaseSlot() {
	a := d.release
	if a == nil {
		return
	}
	start := time.Now()
	err := a.lim.store.Release(context.Background(), a.storeKey, a.slot, d.l.take...)
	if err == nil || len(a.lim.observers) == 0 {
		return
	}
	ev := a.ev
	ev.Latency, ev.Err = time.Since(start), err
	failed := d
	failed.Outcome, failed.Action = OutcomeGiveBackFailed, Serve
	a.lim.observe(ev, &failed)
}

// holdSlot arranges Done's release for d when its request took an
// InFlight slot.
func (l *Limiter) holdSlot(d *Decision, storeKey string) {
	if d.Result.Slot != 0 && d.Result.Allowed {
		d.release = &releaseStep{lim: l, storeKey: storeKey, slot: d.Result.Slot}
	}
}
