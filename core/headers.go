package core

import (
	"math/big"
	"net/http"
	"strconv"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/internal/arith"
)

// HeaderStyle selects the rate-limit headers a Limiter sets on responses:
// HeadersLegacy (the default), HeadersIETF, both (HeadersLegacy|HeadersIETF)
// or none (0). Whatever the style, a request refused over a limit gets
// Retry-After.
type HeaderStyle uint8

const (
	// HeadersLegacy sets the de-facto headers, from the binding limit
	// (see Result):
	//
	//	X-RateLimit-Limit: 10          the limit's capacity (Result.Limit)
	//	X-RateLimit-Remaining: 7       what may still pass now
	//	X-RateLimit-Reset: 1767225600  Unix epoch seconds when the key is
	//	                               back to its full allowance (rounded up)
	//
	// It is the default.
	HeadersLegacy HeaderStyle = 1 << iota
	// HeadersIETF sets the fields of draft-ietf-httpapi-ratelimit-headers-11
	// (May 2026), one list member per limit:
	//
	//	RateLimit-Policy: "api";q=10;w=1
	//	RateLimit: "api";r=7;t=1
	//
	// q is the limit's capacity (as X-RateLimit-Limit), w the seconds in
	// which its rate refills q (the Period when Burst is the default), r
	// what remains, and t the draft's effective window: the seconds within
	// which the client can use no more than r; w and t are rounded up. t
	// runs until the next unit refills for GCRA, TokenBucket and
	// LeakyBucket (not until the bucket is full), until the window ends for
	// FixedWindow (a calendar window's true end; its w is the nominal day,
	// week or 31 days), and until the key is whole again (maybe later than
	// its next unit) for SlidingWindow and SlidingLog; a limit that refused has
	// t at most its RetryAfter, never later than Retry-After (the draft's
	// rule). A MaxInFlight limit, a quota of concurrent requests, has
	// qu="concurrent-requests" and no w in its policy, and no t. Policies
	// are named by WithPolicyNames, else "default" (never after the
	// Limiter's or a plan's name, which are internal), with "-0", "-1", ...
	// appended when the Limiter holds several limits. ProblemJSON gives
	// refusals the draft's problem types.
	HeadersIETF
)

// The header names, in canonical form (http.Header keys).
const (
	headerLimit           = "X-Ratelimit-Limit"
	headerRemaining       = "X-Ratelimit-Remaining"
	headerReset           = "X-Ratelimit-Reset"
	headerRetryAfter      = "Retry-After"
	headerRateLimit       = "Ratelimit"
	headerRateLimitPolicy = "Ratelimit-Policy"
)

// headerPlan is what a Limiter precomputes for its headers.
type headerPlan struct {
	legacy, ietf bool
	// public holds each limit's policy name (for ProblemJSON too), names
	// the same as quoted sf-strings, ready to append.
	public, names []string
	// specs are the limits, for each member's t.
	specs []store.Spec
	// capacity is each limit's capacity, as Results report it in Limit,
	// and capacityText the same in decimal, for X-RateLimit-Limit.
	capacity     []int64
	capacityText []string
	// policy is the RateLimit-Policy value, shared by every response.
	// Its capacity equals its length, so that Header.Add copies it.
	policy []string
}

func newHeaderPlan(style HeaderStyle, name string, specs []store.Spec) headerPlan {
	p := headerPlan{
		legacy: style&HeadersLegacy != 0,
		ietf:   style&HeadersIETF != 0,
		specs:  specs,
	}
	var policy []byte
	for i, s := range specs {
		n := name
		if len(specs) > 1 {
			n += "-" + strconv.Itoa(i)
		}
		p.public = append(p.public, n)
		p.capacity = append(p.capacity, s.Capacity())
		p.capacityText = append(p.capacityText, strconv.FormatInt(s.Capacity(), 10))
		if !p.ietf {
			continue
		}
		quoted := string(appendSFString(nil, n))
		p.names = append(p.names, quoted)
		if i > 0 {
			policy = append(policy, ", "...)
		}
		q, w := quota(s)
		policy = append(policy, quoted...)
		policy = append(policy, ";q="...)
		policy = strconv.AppendInt(policy, q, 10)
		if s.Algorithm() == store.InFlight {
			// A quota of concurrent requests: no window.
			policy = append(policy, `;qu="concurrent-requests"`...)
			continue
		}
		policy = append(policy, ";w="...)
		policy = strconv.AppendInt(policy, w, 10)
	}
	if p.ietf {
		p.policy = []string{string(policy)}
	}
	return p
}

// quota returns a limit's IETF quota q (its capacity, the figure stores
// report as Result.Limit) and window w: the whole seconds, rounded up, in
// which the limit's rate admits q (q·Period/Rate; the Period itself when q
// is the Rate), at least 1.
func quota(s store.Spec) (q, w int64) {
	q = s.Capacity()
	// ceil(q·P / (R·1e6)) exactly: q·P can exceed 64 bits.
	num := new(big.Int).Mul(big.NewInt(q), big.NewInt(s.Period()))
	den := new(big.Int).Mul(big.NewInt(s.Rate()), big.NewInt(int64(time.Second/time.Microsecond)))
	num.Add(num, den).Sub(num, big.NewInt(1)).Quo(num, den)
	w = num.Int64()
	if !num.IsInt64() {
		w = 1<<63 - 1
	}
	return q, max(w, 1)
}

// appendSFString appends s as a Structured Field String (RFC 8941): in
// double quotes, with '"' and '\' escaped. s holds printable ASCII only
// (New checks it).
func appendSFString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '"' || c == '\\' {
			b = append(b, '\\')
		}
		b = append(b, s[i])
	}
	return append(b, '"')
}

// ceilSeconds returns d in whole seconds, rounded up (0 for d ≤ 0).
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return arith.CeilDiv(int64(d), int64(time.Second))
}

// retryAfterSeconds returns the Retry-After value for a denial that may
// pass again after d: whole seconds rounded up, at least 1; 0 for
// store.InfDuration, a request that can never pass (no wait would help).
func retryAfterSeconds(d time.Duration) int64 {
	if d == store.InfDuration {
		return 0
	}
	return max(ceilSeconds(d), 1)
}

// setHeaders sets on h the rate-limit headers of d's HeaderStyle, and
// Retry-After when the request is refused over a limit; nothing when no
// store decided. Times are whole seconds rounded up (X-RateLimit-Reset:
// d's time by the Limiter's clock plus ResetAfter, as Unix time). The
// values are written in blk (new when nil; not to be used again), whose
// buffer holds their bytes unless they outgrow it: one allocation with
// blk nil, none with blk given, but for long values (see headerBlock).
func (d *Decision) setHeaders(h http.Header, blk *headerBlock) {
	if blk == nil {
		d.writeHeaders(h, nil, nil)
		return
	}
	d.writeHeaders(h, blk.vals[:], blk.buf[:])
}

// writeHeaders is setHeaders with the values written in vals and their
// bytes in buf (a new headerBlock when vals is nil); values beyond vals
// or bytes beyond buf move to arrays of their own.
func (d *Decision) writeHeaders(h http.Header, vals []string, buf []byte) {
	if !d.hasFigures() {
		return
	}
	p, res := &d.l.headers, &d.Result
	retry := int64(0)
	if d.Action == Refuse && !res.Allowed {
		retry = retryAfterSeconds(res.RetryAfter)
	}
	if !p.legacy && !p.ietf && retry == 0 {
		return
	}
	if vals == nil {
		blk := new(headerBlock)
		vals, buf = blk.vals[:], blk.buf[:]
	}
	b, n := buf[:0], 0
	// put sets header name to the bytes nb, b with bytes appended, gained,
	// and makes nb b. The value is a string sharing those bytes: nothing
	// writes them again (they are in buf, or in the array append moved b
	// to, and buf is not reused); it keeps buf alive as long as h holds it.
	put := func(name string, nb []byte) {
		if n == len(vals) {
			vals, n = make([]string, maxHeaderValues), 0
		}
		vals[n], b = unsafe.String(unsafe.SliceData(nb[len(b):]), len(nb)-len(b)), nb
		h[name] = vals[n : n+1 : n+1]
		n++
	}
	if p.legacy {
		if i := res.Binding; i >= 0 && i < len(p.capacity) && p.capacity[i] == res.Limit {
			// The binding limit's capacity, as usual: formatted in advance.
			vals[0], n = p.capacityText[i], 1
			h[headerLimit] = vals[:1:1]
		} else {
			put(headerLimit, strconv.AppendInt(b, res.Limit, 10))
		}
		put(headerRemaining, strconv.AppendInt(b, max(res.Remaining, 0), 10))
		put(headerReset, strconv.AppendInt(b, res.ResetAt(time.Unix(d.nowSec, int64(d.nowNsec))).Unix(), 10))
	}
	if retry > 0 {
		put(headerRetryAfter, strconv.AppendInt(b, retry, 10))
	}
	if p.ietf {
		put(headerRateLimit, appendRateLimitField(b, p, res, retry > 0))
		h[headerRateLimitPolicy] = p.policy[:1:1]
	}
}

// appendRateLimitField appends the IETF RateLimit field of res: one item
// per limit, named by p.names. refused says that the request was refused
// over a limit: the limits that refused it have their t capped by their
// RetryAfter.
func appendRateLimitField(b []byte, p *headerPlan, res *store.Result, refused bool) []byte {
	if len(res.PerLimit) != len(p.names) {
		// One limit (or a store that reported no PerLimit).
		i := min(max(res.Binding, 0), len(p.names)-1)
		return appendRateLimitItem(b, p.names[i], p.specs[i], res, refused)
	}
	for i := range res.PerLimit {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = appendRateLimitItem(b, p.names[i], p.specs[i], &res.PerLimit[i], refused)
	}
	return b
}

// headerBlock holds one response's header values, which h refers to, and
// their bytes: buf fits the legacy values and Retry-After (24 bytes for a
// limit of a million, 53 at most, for a limit of 2^53), or a RateLimit
// field of one or two limits with short names; longer values move to an
// array of their own.
type headerBlock struct {
	vals [maxHeaderValues]string
	buf  [48]byte
}

// maxHeaderValues is how many values setHeaders may set: the legacy
// three, Retry-After and RateLimit.
const maxHeaderValues = 5

// legacyBlock is the smaller headerBlock of Stack's record when the
// Limiter sets no IETF fields: room for the legacy values and Retry-After
// (X-RateLimit-Limit, a limit's capacity, is formatted in advance; 24
// bytes fit a Remaining of 13 digits), and no more, keeps the record in
// the 576-byte size class (640 with a headerBlock).
type legacyBlock struct {
	vals [4]string
	buf  [24]byte
}

func appendRateLimitItem(b []byte, name string, s store.Spec, r *store.Result, refused bool) []byte {
	b = append(b, name...)
	b = append(b, ";r="...)
	b = strconv.AppendInt(b, max(r.Remaining, 0), 10)
	if s.Algorithm() == store.InFlight {
		return b // concurrent requests: no window (see HeadersIETF)
	}
	b = append(b, ";t="...)
	return strconv.AppendInt(b, ceilSeconds(effectiveWindow(s, r, refused)), 10)
}

// effectiveWindow returns the draft's t of one limit's result r, before
// rounding: how long the client can use no more than r.Remaining (see
// HeadersIETF). For a limit that refused the request (refused, and r not
// allowed) it is at most r.RetryAfter, which Retry-After rounds up.
func effectiveWindow(s store.Spec, r *store.Result, refused bool) time.Duration {
	t := r.ResetAfter
	switch s.Algorithm() {
	case store.GCRA, store.LeakyBucket, store.TokenBucket:
		// r.Limit is the capacity (store.Spec.Capacity).
		if short := r.Limit - max(r.Remaining, 0) - 1; short >= 0 {
			t -= nextUnitOffset(s, short)
		}
	}
	t = max(t, 0)
	if refused && !r.Allowed && r.RetryAfter != store.InfDuration {
		t = min(t, r.RetryAfter)
	}
	return t
}

// nextUnitOffset returns, for a refill algorithm whose key lacks short+1
// units of its capacity, how much sooner than the whole capacity its next
// unit is back: the time short units take to refill. GCRA and LeakyBucket
// refill one unit per Interval, exactly; TokenBucket refills Rate per
// Period, and its ResetAfter is rounded up to the µs, so the offset is
// rounded up too: the next unit is never announced later than it comes.
func nextUnitOffset(s store.Spec, short int64) time.Duration {
	if s.Algorithm() == store.TokenBucket {
		return arith.Micros(arith.CeilDiv(short*s.Period(), s.Rate())) // short·P < Burst·P, validated below 2^53
	}
	return arith.Micros(short * s.Interval()) // below the capacity's Burst·T, validated below 2^53
}
