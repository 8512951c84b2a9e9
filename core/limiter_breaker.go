package core

import (
	"sync"
	"sync/atomic"
	"time"
)

// BreakerState is the state of a Limiter's circuit breaker.
type BreakerState int32

const (
	// BreakerClosed: the store is called for every decision.
	BreakerClosed BreakerState = iota
	// BreakerOpen: the store has failed repeatedly; the failure policy
	// applies without calling it until the cooldown has passed.
	BreakerOpen
	// BreakerHalfOpen: one request is probing the store; the others
	// follow the failure policy until it answers.
	BreakerHalfOpen
)

func (s BreakerState) String() string {
	switch s {
	case BreakerClosed:
		return "closed"
	case BreakerOpen:
		return "open"
	case BreakerHalfOpen:
		return "half_open"
	}
	return "breaker_state(?)"
}

// breaker counts consecutive store failures. The closed path is lock-free
// (one atomic load before the call, at most one atomic write after); state
// changes take mu, so that openUntil is only written with the state.
type breaker struct {
	threshold int32 // consecutive failures that open it; 0 disables it
	cooldown  time.Duration

	mu sync.Mutex

	state     atomic.Int32 // a BreakerState
	failures  atomic.Int32 // consecutive failures while closed
	openUntil atomic.Int64 // Unix nanoseconds, by the Limiter's clock
}

// allow reports whether the store may be called now, and whether this call
// is the half-open probe (whose outcome alone decides the next state).
func (b *breaker) allow(now func() time.Time) (call, probe bool) {
	if b.threshold == 0 {
		return true, false
	}
	switch BreakerState(b.state.Load()) {
	case BreakerClosed:
		return true, false
	case BreakerOpen:
		if now().UnixNano() < b.openUntil.Load() {
			return false, false
		}
		if b.state.CompareAndSwap(int32(BreakerOpen), int32(BreakerHalfOpen)) {
			return true, true
		}
		return false, false
	default: // half-open: the probe is under way
		return false, false
	}
}

// done records the end of a call that allow permitted. failed says the call
// returned an error; noVerdict that it ended because the client went away,
// which says nothing about the store.
func (b *breaker) done(probe, failed, noVerdict bool, now func() time.Time) {
	if b.threshold == 0 {
		return
	}
	if probe {
		b.mu.Lock()
		defer b.mu.Unlock()
		switch {
		case noVerdict:
			// Back to open with the cooldown already over: the next
			// request probes again.
			b.state.Store(int32(BreakerOpen))
		case failed:
			b.openUntil.Store(now().Add(b.cooldown).UnixNano())
			b.state.Store(int32(BreakerOpen))
		default:
			b.failures.Store(0)
			b.state.Store(int32(BreakerClosed))
		}
		return
	}
	switch {
	case noVerdict:
	case !failed:
		if b.failures.Load() != 0 {
			b.failures.Store(0)
		}
	default:
		if b.failures.Add(1) >= b.threshold {
			b.mu.Lock()
			// Calls that were under way when the breaker opened end here
			// too; only the first to cross the threshold opens it.
			if BreakerState(b.state.Load()) == BreakerClosed {
				b.openUntil.Store(now().Add(b.cooldown).UnixNano())
				b.state.Store(int32(BreakerOpen))
				b.failures.Store(0)
			}
			b.mu.Unlock()
		}
	}
}
