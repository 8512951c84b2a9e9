package core

import (
	"context"
	"time"
)

// doneStep is what Decision.Done does once the handler has written its
// status: release the MaxInFlight slot the request took, and give back
// its charge when WithCountIf does not count the status.
type doneStep struct {
	lim      *Limiter
	storeKey string
	cost     int64 // the charge to give back; 0: none (no WithCountIf)
	stamp    int64
	slot     int64 // the slot to release; 0: none
	ev       Event // the decision's Event, for a failed give-back
}

// done arranges Done for d, a decision the store made of a request of cost
// for the store key prefix + key, when it took a slot or may have to give
// its charge back.
func (l *Limiter) done(d *Decision, prefix, key string, cost int64) {
	refund := l.countIf != nil && cost > 0
	if !d.Result.Allowed || d.Result.Slot == 0 && !refund {
		return
	}
	d.after = &doneStep{lim: l, storeKey: prefix + key, slot: d.Result.Slot}
	if refund {
		d.after.cost, d.after.stamp = cost, d.Result.Stamp
	}
}

// NeedsDone reports whether the adapter must call Done after the handler:
// for a request a Limiter with WithCountIf charged, or that took a
// MaxInFlight slot. An adapter that must wrap the ResponseWriter to learn
// the status does so only then.
func (d Decision) NeedsDone() bool { return d.after != nil }

// Done tells the Limiter that the handler has finished the request with
// status (200 for a handler that wrote none, 500 for one that panicked,
// 503 for a Hold cut short). Adapters call it once after the handler
// whenever NeedsDone reports true, also on a panic or a client gone. It
// releases the request's MaxInFlight slot and, under WithCountIf, gives
// the charge back when count does not count status. A failure is reported
// to observers (OutcomeGiveBackFailed): the slot is then free at the end
// of its hold, the charge stays. The store bounds the time (the Redis
// store: its timeout).
func (d Decision) Done(status int) {
	a := d.after
	if a == nil {
		return
	}
	if a.slot != 0 {
		start := time.Now()
		a.report(&d, start, a.lim.store.Release(context.Background(), a.storeKey, a.slot, d.l.take...))
	}
	if a.cost != 0 && !a.lim.countIf(status) {
		start := time.Now()
		a.report(&d, start, a.lim.store.Refund(context.Background(), a.storeKey, a.cost, a.stamp, d.l.take...))
	}
}

// report tells the observers of a failed give-back or release begun at start.
func (a *doneStep) report(d *Decision, start time.Time, err error) {
	if err == nil || len(a.lim.observers) == 0 {
		return
	}
	ev := a.ev
	ev.Latency, ev.Err = time.Since(start), err
	failed := *d
	failed.Outcome, failed.Action = OutcomeGiveBackFailed, Serve
	a.lim.observe(ev, &failed)
}
