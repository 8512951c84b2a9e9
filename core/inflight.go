package core

import (
	"context"
	"fmt"

	"github.com/sluicehq/sluice/core/store"
)

// releaseStep is what Decision.Done does for a request that took an
// InFlight slot (see MaxInFlight): give the slot back.
type releaseStep struct {
	lim      *Limiter
	st       store.Releaser // the store that took it (the fallback, under FailLocal)
	storeKey string
	slot     int64
}

// NeedsDone reports whether the adapter must call Done once the request
// is over: for a request that took an InFlight slot (MaxInFlight).
func (d Decision) NeedsDone() bool { return d.release != nil }

// Done tells the Limiter that the request is over, with the status its
// handler wrote (200 for a handler that wrote none, 500 for one that
// panicked, 503 for a request whose Hold was cut short). Adapters call it
// once, after the handler, whenever NeedsDone reports true, also when the
// handler panics or the client has gone; otherwise it does nothing. It
// releases the request's InFlight slot in the store that took it, within
// the Limiter's per-decision timeout and whatever the request's context;
// a slot whose release fails is free at the end of its hold. It is safe to
// call from any goroutine; a second call changes nothing more.
func (d Decision) Done(status int) {
	_ = status // the in-flight release does not depend on it
	d.releaseSlot()
}

// releaseSlot gives back the request's InFlight slot, if it took one.
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
	_ = a.st.Release(ctx, a.storeKey, a.slot, d.l.take...)
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
		inFlight = inFlight || specs[i].Algorithm() == InFlight
	}
	if !inFlight {
		return nil
	}
	if _, ok := l.store.(store.Releaser); !ok {
		return fmt.Errorf("%w: MaxInFlight needs a store that can release a slot (a store.Releaser); %T is not one", ErrInvalidOption, l.store)
	}
	if _, ok := l.fallback.(store.Releaser); l.policy == FailLocal && !ok {
		return fmt.Errorf("%w: MaxInFlight needs a fallback store that can release a slot (a store.Releaser); %T is not one", ErrInvalidOption, l.fallback)
	}
	return nil
}
