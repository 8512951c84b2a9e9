package core

import (
	"math/big"
	"net/http"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/core/store"
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
	// HeadersIETF sets the fields of draft-ietf-httpapi-ratelimit-headers
	// (draft 08 and later), one list member per limit:
	//
	//	RateLimit-Policy: "api";q=10;w=1
	//	RateLimit: "api";r=7;t=1
	//
	// q is the limit's capacity (as X-RateLimit-Limit) and w the seconds
	// in which the limit's rate refills q (the Period when Burst is the
	// default), rounded up; r is what remains and t the delta seconds until
	// the limit is back to its full allowance, rounded up. Policies are
	// named by WithPolicyNames, else "default": never after the Limiter's
	// name or a plan's, which are internal; "-0", "-1", ... are appended
	// when the Limiter holds several limits.
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
	// names holds each limit's policy name as an sf-string, quotes
	// included, ready to append.
	names []string
	// policy is the RateLimit-Policy value, shared by every response.
	// Its capacity equals its length, so that Header.Add copies it.
	policy []string
}

func newHeaderPlan(style HeaderStyle, name string, specs []store.Spec) headerPlan {
	p := headerPlan{
		legacy: style&HeadersLegacy != 0,
		ietf:   style&HeadersIETF != 0,
	}
	if !p.ietf {
		return p
	}
	var policy []byte
	for i, s := range specs {
		n := name
		if len(specs) > 1 {
			n += "-" + strconv.Itoa(i)
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
		policy = append(policy, ";w="...)
		policy = strconv.AppendInt(policy, w, 10)
	}
	p.policy = []string{string(policy)}
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
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	return s
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
// store decided. X-RateLimit-Reset is d's time by the Limiter's clock plus
// ResetAfter, in Unix seconds rounded up; Retry-After and the IETF t are
// delta seconds rounded up. The values are formatted in blk (a new
// headerBlock when nil), which must not be used again.
func (d Decision) setHeaders(h http.Header, blk *headerBlock) {
	if d.Result.Limit == 0 || d.l == nil {
		return
	}
	p := &d.l.headers
	retry := int64(0)
	if d.Action == Refuse && !d.Result.Allowed {
		retry = retryAfterSeconds(d.Result.RetryAfter)
	}
	if !p.legacy && !p.ietf && retry == 0 {
		return
	}
	vals := d.headerValues(p, retry, blk)
	i := 0
	if p.legacy {
		h[headerLimit] = vals[0:1:1]
		h[headerRemaining] = vals[1:2:2]
		h[headerReset] = vals[2:3:3]
		i = 3
	}
	if retry > 0 {
		h[headerRetryAfter] = vals[i : i+1 : i+1]
		i++
	}
	if p.ietf {
		h[headerRateLimit] = vals[i : i+1 : i+1]
		h[headerRateLimitPolicy] = p.policy[:1:1]
	}
}

// headerValues formats the values of the headers setHeaders sets, in its
// order: the legacy three, Retry-After when retry > 0, the IETF RateLimit
// field. All of them are formatted into one buffer on the stack, then
// copied into one string that the values share; the returned slice is
// blk's (a new headerBlock when nil): at most two allocations whatever the
// style.
func (d Decision) headerValues(p *headerPlan, retry int64, blk *headerBlock) []string {
	res := &d.Result
	if blk == nil {
		blk = new(headerBlock)
	}
	var buf [128]byte
	b := buf[:0]
	var ends [len(blk.vals)]int // where each value ends in b
	n := 0
	if p.legacy {
		b = strconv.AppendInt(b, res.Limit, 10)
		ends[n], n = len(b), n+1
		b = strconv.AppendInt(b, max(res.Remaining, 0), 10)
		ends[n], n = len(b), n+1
		b = strconv.AppendInt(b, res.ResetAt(d.now).Unix(), 10)
		ends[n], n = len(b), n+1
	}
	if retry > 0 {
		b = strconv.AppendInt(b, retry, 10)
		ends[n], n = len(b), n+1
	}
	if p.ietf {
		b = appendRateLimitField(b, p.names, res)
		ends[n], n = len(b), n+1
	}
	s := string(b)
	vals := blk.vals[:n]
	for i, start := 0, 0; i < n; i++ {
		vals[i], start = s[start:ends[i]], ends[i]
	}
	return vals
}

// appendRateLimitField appends the IETF RateLimit field of res: one item
// per limit, named by names.
func appendRateLimitField(b []byte, names []string, res *store.Result) []byte {
	if len(res.PerLimit) != len(names) {
		// One limit (or a store that reported no PerLimit).
		return appendRateLimitItem(b, names[min(max(res.Binding, 0), len(names)-1)], res)
	}
	for i := range res.PerLimit {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = appendRateLimitItem(b, names[i], &res.PerLimit[i])
	}
	return b
}

// headerBlock holds one response's header values: the slices h refers to.
// headerValues' 128-byte buffer fits the legacy headers and an IETF
// RateLimit field of a few limits with short names; longer fields grow
// into a second array.
type headerBlock struct {
	vals [5]string
}

func appendRateLimitItem(b []byte, name string, r *store.Result) []byte {
	b = append(b, name...)
	b = append(b, ";r="...)
	b = strconv.AppendInt(b, max(r.Remaining, 0), 10)
	b = append(b, ";t="...)
	return strconv.AppendInt(b, ceilSeconds(r.ResetAfter), 10)
}
