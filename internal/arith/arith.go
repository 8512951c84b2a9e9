// Package arith holds arithmetic of ALGORITHMS.md that both the memory
// store (core/memorystore) and the Redis store's decoders
// (core/redisstore) compute, so that it is written once.
package arith

import (
	"fmt"
	"math"
	"time"

	"github.com/sluicehq/sluice/core/store"
)

// CeilDiv is ceil(a/b) for a ≥ 0, b > 0, without the overflow of
// (a+b-1)/b near the top of int64.
func CeilDiv(a, b int64) int64 {
	q := a / b
	if q*b != a {
		q++
	}
	return q
}

// Micros converts a figure in µs to a Duration: 0 for us ≤ 0, and
// math.MaxInt64 (store.InfDuration, "never") for a figure a Duration
// cannot hold.
func Micros(us int64) time.Duration {
	const maxMicros = math.MaxInt64 / int64(time.Microsecond)
	switch {
	case us <= 0:
		return 0
	case us > maxMicros:
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(us) * time.Microsecond
}

// SlidingWindowRetry is the wait, in µs, of a denied SlidingWindow request
// of cost n ≤ r (ALGORITHMS.md): r per period p, e µs into the current
// window, c units counted in it and prev in the previous one. It is the
// first instant later in this window at which the weighted previous count
// has decayed enough, else the first one in the next window, where the
// current count becomes the previous one.
func SlidingWindowRetry(r, p, e, c, prev, n int64) int64 {
	if r-c-n >= 0 && prev > 0 {
		if e1 := p - (r-c-n)*p/prev; e1 < p {
			return e1 - e
		}
	}
	var e2 int64
	if c > 0 {
		e2 = max(0, p-(r-n)*p/c)
	}
	return (p - e) + e2
}

// Combine returns the overall Result of a Take over several limits from
// each limit's own Result, in the order the limits were given: the binding
// limit's figures (see store.Result), Delay the largest of all, and
// PerLimit set to perLimit when it holds more than one. perLimit must not
// be empty.
func Combine(perLimit []store.Result) store.Result {
	if len(perLimit) == 1 {
		r := perLimit[0]
		r.Binding, r.PerLimit = 0, nil
		return r
	}
	allowed := true
	for i := range perLimit {
		if !perLimit[i].Allowed {
			allowed = false
			break
		}
	}
	binding := -1
	var delay time.Duration
	for i := range perLimit {
		r := &perLimit[i]
		if r.Delay > delay {
			delay = r.Delay
		}
		switch {
		case allowed:
			if binding < 0 || r.Remaining < perLimit[binding].Remaining {
				binding = i
			}
		case !r.Allowed:
			if binding < 0 || r.RetryAfter > perLimit[binding].RetryAfter {
				binding = i
			}
		}
	}
	out := perLimit[binding]
	out.Binding = binding
	out.Slot = slotOf(perLimit)
	out.PerLimit = perLimit
	if allowed {
		out.Delay = delay
	} else {
		out.Delay = 0
	}
	return out
}

// slotOf returns the slot of a Take's limits: the one their Results name.
func slotOf(perLimit []store.Result) int64 {
	for i := range perLimit {
		if perLimit[i].Slot != 0 {
			return perLimit[i].Slot
		}
	}
	return 0
}

// errZeroSpec is CheckSpec's error.
var errZeroSpec = fmt.Errorf("%w: the zero Spec; make Specs with Limit.Spec", store.ErrInvalidLimit)

// CheckSpec returns an error wrapping store.ErrInvalidLimit for the zero
// Spec (the only invalid one: Limit.Spec makes every other), which stores
// refuse.
func CheckSpec(s store.Spec) error {
	if s.Rate() <= 0 {
		return errZeroSpec
	}
	return nil
}
