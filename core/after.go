package core

import (
	"context"
	"time"
)

// afterStep is what Decision.Done does for a request the Limiter must see
// again once the handler has written its status: give back its charge
// when WithCountIf does not count the status.
type afterStep struct {
	lim      *Limiter
	storeKey string
	cost     int64
	stamp    int64
	ev       Event // the decision's Event before observe, for a failed give-back
}

// NeedsDone reports whether the adapter must call Done after the handler:
// only for a request that a Limiter with WithCountIf charged, or that took
// a MaxInFlight slot. An adapter that cannot learn the status cheaply
// (net/http wraps the ResponseWriter) does so only then.
func (d Decision) NeedsDone() bool { return d.after != nil || d.release != nil }

// Done tells the Limiter that the handler has finished the request with
// status (200 for a handler that wrote no status, 500 for one that
// panicked, 503 for a request whose Hold was cut short). Adapters call it
// once, after the handler, whenever NeedsDone reports true, also when the
// handler panics or the client has gone; otherwise it does nothing. It
// releases the request's MaxInFlight slot, if it took one, whatever the
// status (see releaseSlot). With WithCountIf, when count
// does not count status, the request's charge is given back to the store
// that made it; a failure is
// reported to observers (OutcomeGiveBackFailed) and changes nothing else.
// The store bounds the give-back's time (the Redis store: its timeout).
func (d Decision) Done(status int) {
	d.releaseSlot()
	a := d.after
	if a == nil || a.lim.countIf(status) {
		return
	}
	start := time.Now()
	err := a.lim.store.Refund(context.Background(), a.storeKey, a.cost, a.stamp, d.l.take...)
	if err == nil || len(a.lim.observers) == 0 {
		return
	}
	ev := a.ev
	ev.Latency, ev.Err = time.Since(start), err
	failed := d
	failed.Outcome, failed.Action = OutcomeGiveBackFailed, Serve
	a.lim.observe(ev, &failed)
}

// needsDone arranges Done's give-back for d when the Limiter counts by
// outcome and d's request was charged.
func (l *Limiter) needsDone(d *Decision, storeKey string, cost int64) {
	if l.countIf != nil && cost > 0 && d.Result.Allowed {
		d.after = &afterStep{lim: l, storeKey: storeKey, cost: cost, stamp: d.Result.Stamp}
	}
}
