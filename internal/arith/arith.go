// Package arith holds arithmetic of ALGORITHMS.md that both the memory
// store (core/memorystore) and the Redis store's decoders
// (core/redisstore) compute, so that it is written once.
package arith

import (
	"math"
	"time"
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
