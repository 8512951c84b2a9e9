package core

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/core/store"
)

// releaseStep is what Decision.Done does for a request that took an
// InFlight slot (see MaxInFlight): give the slot back.
type releaseStep struct {
	lim      *Limiter
	st       store.Releaser // the store that took it (the fallback, under FailLocal)
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
	ctx := context.Background()
	if a.lim.timeout > 0 && !a.lim.local {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, a.lim.timeout)
		defer cancel()
	}
	start := time.Now()
	err := a.st.Release(ctx, a.storeKey, a.slot, d.l.take...)
	if err == nil || len(a.lim.observers) == 0 {
		return
	}
	ev := a.ev
	ev.Latency, ev.Err = time.Since(start), err
	failed := d
	failed.Outcome, failed.Action = OutcomeGiveBackFailed, Serve
	a.lim.observe(ev, &failed)
}

// holdSlot arranges Done's release for d, decided by s, when its request
// took an InFlight slot.
func (l *Limiter) holdSlot(d *Decision, s store.Store, storeKey string) {
	if d.Result.Slot == 0 || !d.Result.Allowed {
		return
	}
	if r, ok := s.(store.Releaser); ok {
		d.release = &releaseStep{lim: l, st: r, storeKey: storeKey, slot: d.Result.Slot}
	}
}

// checkReleasers reports, for limits holding an InFlight limit, a store or
// a local fallback store that cannot release a slot: every slot would
// stay taken for its whole hold.
func (l *Limiter) checkReleasers(specs []store.Spec) error {
	inFlight := false
	for i := range specs {
		inFlight = inFlight || specs[i].Algorithm() == store.InFlight
	}
	if !inFlight {
		return nil
	}
	if _, ok := l.store.(store.Releaser); !ok {
		return fmt.Errorf("%w: MaxInFlight needs a store that can release a slot (a store.Releaser); %T is not one", ErrInvalidOption, l.store)
	}
	if _, ok := l.fallback.(store.Releaser); l.policy == FailLocal && l.fallback != nil && !ok {
		return fmt.Errorf("%w: MaxInFlight needs a fallback store that can release a slot (a store.Releaser); %T is not one", ErrInvalidOption, l.fallback)
	}
	return nil
}
