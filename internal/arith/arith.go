// Package arith holds arithmetic of ALGORITHMS.md that both the memory
// store (package core) and the Redis store's decoders (package
// core/redisstore) compute, so that it is written once.
package arith

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
