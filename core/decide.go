package core

import (
	"context"
	"errors"
	"net/http"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/internal/clientaddr"
	"github.com/sluicehq/sluice/internal/nofallback"
)

// Decide makes the decision for one request. Adapters call it once per
// request; it never fails: errors are handled by the failure policy and
// the key-error rule, and reported to observers.
func (l *Limiter) Decide(r *http.Request) Decision {
	if l.skip != nil && l.skip(r) {
		d := Decision{Action: Serve, Outcome: OutcomeSkipped, l: l.cfg.Load()}
		l.finish(r, &d, &Event{})
		return d
	}
	key, keyErr := l.keyOf(r)
	// The store key is prefix + key, built by consult.
	prefix, storeKey := l.keyPrefix, key
	if keyErr != nil {
		l.logKeyError(r.Context(), keyErr)
		if l.keyRule != KeyErrorPerAddress || errors.Is(keyErr, ErrInvalidOption) {
			d := l.keyRefusal(keyErr)
			l.finish(r, &d, &Event{KeyErr: keyErr})
			return d
		}
		key, prefix, storeKey = "", "", l.keylessKey(r)
	}
	// Loaded once: a concurrent SetLimits or SetPlans does not change what
	// this decision is made with.
	cfg := l.configFor(r)
	cost, costErr := l.cost(r)
	var ev *Event // for observers only
	if len(l.observers) > 0 {
		ev = &Event{Key: key, Cost: cost, Err: costErr, KeyErr: keyErr}
	}
	d := l.consult(r.Context(), cfg, prefix, storeKey, cost, ev)
	l.finish(r, &d, ev)
	return d
}

// DecideKey decides, as Decide does, for a client key without an HTTP
// request (background jobs, queue consumers, other transports), with the
// same store, limits, failure policy, shadow mode and observers. key is in
// the namespace of the key function's keys (a client keyed "alice" by HTTP
// and by DecideKey shares one allowance); plan names its plan (WithPlans;
// "" or an unknown plan: the Limiter's own limits); cost is what the call
// costs (a negative cost is replaced by 1 and reported in Event.Err). The
// skip, cost, plan and refusal functions are not called, and the Event has
// no Request. ctx bounds the store's work.
//
// The caller acts on the Decision as an adapter does: Serve, Hold (Wait
// with the call's context, then serve) or Refuse (Result.RetryAfter says
// when to try again), and calls Done with an HTTP-like status once the
// work has finished when NeedsDone reports true. An empty key is a key
// error: refused under KeyErrorDeny and KeyErrorPerAddress (it has no
// address), served under KeyErrorAllow.
func (l *Limiter) DecideKey(ctx context.Context, key, plan string, cost int64) Decision {
	if key == "" {
		l.logKeyError(ctx, errEmptyKey)
		d := l.keyRefusal(errEmptyKey)
		if l.keyRule == KeyErrorPerAddress {
			d.Action, d.resp = Refuse, &keyDeniedResponse
		}
		l.finish(nil, &d, &Event{KeyErr: errEmptyKey})
		return d
	}
	var costErr error
	if cost < 0 {
		cost, costErr = 1, errNegativeCost
	}
	var ev *Event // for observers only
	if len(l.observers) > 0 {
		ev = &Event{Key: key, Cost: cost, Err: costErr}
	}
	d := l.consult(ctx, l.configNamed(plan), l.keyPrefix, key, cost, ev)
	l.finish(nil, &d, ev)
	return d
}

// keyOf returns r's key, or the key function's error (errEmptyKey for "").
func (l *Limiter) keyOf(r *http.Request) (string, error) {
	key, err := l.key(r)
	if err == nil && key == "" {
		err = errEmptyKey
	}
	return key, err
}

// keylessKey is the store key of a request without a key: the keyless
// prefix (which no key of any Limiter reaches), then "a:" and the key of
// WithKeyErrorRule's function, else "p:" and the peer's address key, else
// (no address) nothing.
func (l *Limiter) keylessKey(r *http.Request) string {
	if l.addrKey != nil {
		if k, err := l.addrKey(r); err == nil && k != "" {
			return l.keylessPrefix + "a:" + k
		}
	}
	if k, ok := clientaddr.PeerKey(r.RemoteAddr); ok {
		return l.keylessPrefix + "p:" + k
	}
	return l.keylessPrefix
}

// keyRefusal is the decision for a request without a key under
// KeyErrorDeny or KeyErrorAllow, or refused with 500 whatever the rule when
// err wraps ErrInvalidOption.
func (l *Limiter) keyRefusal(err error) Decision {
	d := Decision{Action: Serve, Outcome: OutcomeKeyError, l: l.cfg.Load()}
	switch {
	case errors.Is(err, ErrInvalidOption):
		d.Action, d.resp = Refuse, &misconfiguredResponse
	case l.keyRule == KeyErrorDeny:
		d.Action, d.resp = Refuse, &keyDeniedResponse
	}
	return d
}

// cost returns what r costs; a negative cost from the cost function is
// replaced by 1 and reported.
func (l *Limiter) cost(r *http.Request) (int64, error) {
	if l.costOf == nil {
		return 1, nil
	}
	if c := l.costOf(r); c >= 0 {
		return c, nil
	}
	return 1, errNegativeCost
}

// consult decides with the store for the store key prefix + key, or by
// the failure policy when the store fails, and notes the latency and the
// store's error in ev, which is nil without observers.
func (l *Limiter) consult(ctx context.Context, cfg *limiterConfig, prefix, key string, cost int64, ev *Event) Decision {
	// The clock is read lazily: once for the headers, and before the store
	// only while a guard is in force (see SetLimits) or for observers (the
	// latency).
	var now time.Time
	if !cfg.expires.IsZero() {
		now = l.now()
		if !now.Before(cfg.expires) {
			cfg = l.dropExpiredGuards(cfg, now)
		}
	}
	sctx := ctx
	if l.policy != FailLocal {
		sctx = nofallback.Mark(ctx)
	}
	// The latency is for observers only: without them, the one clock
	// reading after the store is the decision's time.
	timed := len(l.observers) > 0
	var start, end time.Time
	if timed {
		start = time.Now()
	}
	var res store.Result
	var err error
	var stamp int64 // the memory store's clock at the decision (µs), 0: unknown
	if mem, ok := l.store.(*memorystore.Store); ok && l.countIf == nil {
		// The memory store keeps no reference to the key: it is built on
		// the stack when it is short (BenchmarkDecide). Its Charge is its
		// Take with the reading of its clock, which, without the
		// Limiter's own clock, is the decision's time: one reading less.
		var buf [64]byte
		k := append(append(buf[:0], prefix...), key...)
		res, err = mem.Charge(sctx, unsafe.String(unsafe.SliceData(k), len(k)), cost, cfg.take...)
		stamp, res.Stamp = res.Stamp, 0
	} else if l.countIf == nil {
		res, err = l.store.Take(sctx, prefix+key, cost, cfg.take...)
	} else {
		res, err = l.store.Charge(sctx, prefix+key, cost, cfg.take...)
	}
	if timed || l.clock == nil && stamp == 0 {
		end = time.Now()
	}
	if timed {
		ev.Latency = end.Sub(start)
	}
	switch {
	case l.clock == nil && stamp != 0:
		now = time.UnixMicro(stamp)
	case l.clock == nil:
		now = end
	case now.IsZero():
		now = l.now()
	}
	d := Decision{l: cfg, nowSec: now.Unix(), nowNsec: int32(now.Nanosecond())}
	if err != nil {
		if ev != nil {
			ev.Err = err
		}
		switch {
		case ctx.Err() != nil:
			// The client is gone: no policy serves it (see OutcomeCanceled).
			d.Action, d.Outcome, d.resp = Refuse, OutcomeCanceled, &unavailableResponse
		case l.policy == FailClosed:
			d.Action, d.Outcome, d.resp = Refuse, OutcomeFailedClosed, &unavailableResponse
		default: // FailOpen, or FailLocal on a store that could not decide locally
			d.Action, d.Outcome = Serve, OutcomeFailedOpen
		}
		return d
	}
	d.Result = cfg.fold(res)
	switch {
	case !d.Result.Allowed:
		d.Action, d.Outcome, d.resp = Refuse, OutcomeDenied, &denyResponse
	case d.Result.Delay > 0:
		d.Action, d.Outcome, d.Delay, d.resp = Hold, OutcomeDelayed, d.Result.Delay, &unavailableResponse
	default:
		d.Action, d.Outcome = Serve, OutcomeAllowed
	}
	if res.Fallback != nil {
		d.Outcome = OutcomeFallback
		if ev != nil {
			ev.Err = res.Fallback
		}
	}
	l.done(&d, prefix, key, cost)
	return d
}

// finish applies shadow mode to d (everything is served, nothing held;
// a denial is reported as OutcomeShadowDenied, a delay as allowed), the
// refusal function (for a request r; DecideKey passes none), tells the
// observers with ev (by pointer: an Event is large, and only observers
// need one; nil without observers).
func (l *Limiter) finish(r *http.Request, d *Decision, ev *Event) {
	if l.shadow {
		switch d.Outcome {
		case OutcomeDenied:
			d.Outcome = OutcomeShadowDenied
		case OutcomeDelayed:
			d.Outcome = OutcomeAllowed
		}
		d.Action, d.Delay, d.resp = Serve, 0, nil
	}
	if l.refusal != nil && d.resp != nil && r != nil {
		resp := l.refusal(r, *d)
		d.resp = &resp
	}
	if len(l.observers) > 0 {
		ev.Request = r
		l.observe(*ev, d)
		if d.after != nil {
			d.after.ev = *ev
		}
	}
}

func (l *Limiter) observe(ev Event, d *Decision) {
	ev.Limiter = l.name
	if d.l != nil {
		ev.Plan = d.l.plan
		if b := d.Result.Binding; d.Result.Limit != 0 && b >= 0 && b < len(d.l.limits) {
			ev.Limit = d.l.limits[b]
		}
		if d.Result.Allowed && d.Outcome != OutcomeGiveBackFailed {
			ev.NearLimit = nearLimit(d.l.limits, &d.Result)
		}
	}
	ev.Outcome = d.Outcome
	ev.Action = d.Action
	ev.Result = d.Result
	ev.Shadow = l.shadow
	for _, f := range l.observers {
		f(ev)
	}
}
