package core

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/internal/storekey"
)

// An Option configures a Limiter in New. Options apply in order; a later
// one replaces an earlier one of its kind, except WithObserver, which adds.
type Option interface{ apply(*options) error }

// optionFunc adapts a function to Option.
type optionFunc func(*options) error

func (f optionFunc) apply(o *options) error { return f(o) }

// options is what an Option sees: the Limiter under construction, and
// the plans New validates once every option has applied.
type options struct {
	l     *Limiter
	plans map[string][]store.Limit
}

// setting is an Option that applies set to the Limiter, or, when the
// argument is invalid, fails with an error wrapping ErrInvalidOption that
// says problem.
func setting(invalid bool, problem string, set func(*Limiter)) Option {
	return optionFunc(func(o *options) error {
		if invalid {
			return fmt.Errorf("%w: %s", ErrInvalidOption, problem)
		}
		set(o.l)
		return nil
	})
}

// maxNameLength bounds the length of a Limiter's, a plan's or a policy's
// name.
const maxNameLength = storekey.MaxName

// checkName reports a name that is not 1 to maxNameLength printable ASCII
// characters.
func checkName(what, name string) error {
	if name == "" || len(name) > maxNameLength {
		return fmt.Errorf("%w: %s must be 1 to %d characters, got %d", ErrInvalidOption, what, maxNameLength, len(name))
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; c < 0x20 || c > 0x7e {
			return fmt.Errorf("%w: %s %q: only printable ASCII characters are allowed", ErrInvalidOption, what, name)
		}
	}
	return nil
}

// WithCost sets what a request costs, in units of the limits' Rate: f is
// called once per request that is not skipped and has a key (it must be
// safe for concurrent use). The default cost is 1. A cost of 0 charges
// nothing: the request is decided on the current state and gets the
// headers. A cost larger than a limit's burst never passes and is refused
// without Retry-After. A negative cost is replaced by 1 and reported in
// Event.Err, wrapping store.ErrNegativeCost.
func WithCost(f func(*http.Request) int64) Option {
	return setting(f == nil, "cost function is nil", func(l *Limiter) { l.costOf = f })
}

// WithSkip exempts the requests for which f returns true (an allow-list,
// health checks): they are served without key, store or headers, and
// observed as OutcomeSkipped. f runs first on every request; it must be
// cheap and safe for concurrent use.
func WithSkip(f func(*http.Request) bool) Option {
	return setting(f == nil, "skip function is nil", func(l *Limiter) { l.skip = f })
}

// WithCountIf counts a request only when count returns true for the status
// its handler wrote: WithCountIf(func(s int) bool { return s >= 400 })
// counts failed logins only. Every request is charged up front, so that
// concurrent attempts are limited exactly, and holds its units while in
// flight; after the handler, Decision.Done gives the charge back
// (store.Store.Refund, ALGORITHMS.md) when count says no. A failed
// give-back is reported as OutcomeGiveBackFailed and leaves the charge; a
// give-back never sets nor lifts a penalty lock. count must be safe for
// concurrent use.
func WithCountIf(count func(status int) bool) Option {
	return setting(count == nil, "count function is nil", func(l *Limiter) { l.countIf = count })
}

// FailurePolicy is what a Limiter does when its store cannot decide (an
// error, the store's deadline, an open circuit breaker). It travels with
// each call (in its context), so Limiters on one store may differ.
type FailurePolicy uint8

const (
	// FailLocal lets the store decide locally when it can: the Redis
	// store's fallback (redisstore.WithFallback, on by default) starts
	// from Redis' last answer for the key, takes this instance's share of
	// it, and charges what it admitted to Redis once it is back. Such
	// decisions are OutcomeFallback, with headers. A store that cannot
	// decide serves the request (OutcomeFailedOpen). It is the default.
	FailLocal FailurePolicy = iota
	// FailOpen serves the request unlimited, without headers.
	FailOpen
	// FailClosed refuses the request with 503 Service Unavailable,
	// without headers.
	FailClosed
)

// WithFailurePolicy sets what happens when the store fails; see
// FailurePolicy. The default is FailLocal.
func WithFailurePolicy(p FailurePolicy) Option {
	return setting(p > FailClosed, fmt.Sprintf("unknown failure policy %d", p), func(l *Limiter) {
		l.policy = p
	})
}

// WithObserver adds f to the functions called with the Event of every
// decision, for logs and metrics (packages promlimit, otellimit and
// sloglimit). Observers run on the request's goroutine, in order: they
// must be quick, safe for concurrent use, and not keep Event.Request.
func WithObserver(f func(Event)) Option {
	return setting(f == nil, "observer is nil", func(l *Limiter) { l.observers = append(l.observers, f) })
}

// WithShadow puts the Limiter in shadow mode, to try limits in
// production: requests are decided, charged and observed as usual (a
// denial as OutcomeShadowDenied) and get the rate-limit headers but no
// Retry-After, and every request is served at once, whatever the store,
// the failure policy or the key-error rule says.
func WithShadow() Option {
	return setting(false, "", func(l *Limiter) { l.shadow = true })
}

// WithHeaders selects the rate-limit response headers; see HeaderStyle.
// The default is HeadersLegacy.
func WithHeaders(style HeaderStyle) Option {
	invalid := style&^(HeadersLegacy|HeadersIETF) != 0
	return setting(invalid, fmt.Sprintf("unknown header style %d", style), func(l *Limiter) { l.style = style })
}

// WithPolicyNames names the IETF RateLimit policies (HeadersIETF), which
// clients see (the Limiter's and plans' own names are never sent):
// names[""] names the Limiter's own limits, names[p] those of plan p
// (WithPlans; else the Limiter's), "default" when none is given. Names
// should say what the limit is to clients ("api", "uploads"); each must be
// 1 to 128 printable ASCII characters.
func WithPolicyNames(names map[string]string) Option {
	return optionFunc(func(o *options) error {
		out := make(map[string]string, len(names))
		for plan, name := range names {
			if err := checkName("policy name of "+strconv.Quote(plan), name); err != nil {
				return err
			}
			out[plan] = name
		}
		o.l.policyNames = out
		return nil
	})
}

// KeyErrorRule is what a Limiter does with a request whose key function
// fails or returns "". No rule skips limiting silently: each is explicit
// and observed (Event.KeyErr), and the first key error of a Limiter is
// logged once (slog.Default()).
type KeyErrorRule uint8

const (
	// KeyErrorPerAddress limits requests without a key by client address,
	// each address in a bucket of its own, with the Limiter's limits, in a
	// namespace no key reaches. The address is the key of WithKeyErrorRule's
	// addr function (keyfuncs.IP with your trusted proxies), else the
	// peer's (IPv6 by /56, 6to4 and Teredo by their IPv4, as keyfuncs.IP
	// groups them). It is the default: a client sending garbage tokens
	// spends its own address's allowance, never that of others without a
	// key. Behind proxies, pass the addr function that sees through them:
	// by the peer alone, every client behind a proxy shares its bucket.
	KeyErrorPerAddress KeyErrorRule = iota
	// KeyErrorDeny refuses requests without a key with 403 Forbidden: not
	// over a limit, not acceptable at all (an API call without its API
	// key), so 429 and Retry-After would only invite a pointless retry.
	// It is not the default, as it would answer 403 before a handler could
	// answer the 401 that makes a client refresh an expired token.
	KeyErrorDeny
	// KeyErrorAllow serves requests without a key unlimited, without
	// rate-limit headers (OutcomeKeyError).
	KeyErrorAllow
)

// WithKeyErrorRule sets the rule for requests without a key (see
// KeyErrorRule; the default is KeyErrorPerAddress) and, for
// KeyErrorPerAddress, addr: the key function of the client's address
// (nil, or when it fails: the peer's address).
func WithKeyErrorRule(rule KeyErrorRule, addr KeyFunc) Option {
	return setting(rule > KeyErrorAllow, fmt.Sprintf("unknown key-error rule %d", rule), func(l *Limiter) {
		l.keyRule, l.addrKey = rule, addr
	})
}

// WithRefusal sets the response refused requests get: f returns it for r
// and its Decision d, whose Response is the default (429 over a limit, 503
// when the store could not decide or a Hold was cut short, 403 under
// KeyErrorDeny) and whose Outcome says why. The adapters write it after
// the rate-limit headers, Retry-After included. f is called for each
// refused or held request; it must be safe for concurrent use.
func WithRefusal(f func(r *http.Request, d Decision) Response) Option {
	return setting(f == nil, "refusal function is nil", func(l *Limiter) { l.refusal = f })
}

// WithClock sets the clock a Limiter reads for X-RateLimit-Reset and for
// its guards' horizons (SetLimits); the default is time.Now (on the memory
// store, the store's own reading at the decision). It is meant for tests:
// give the Limiter and the memory store (memorystore.WithClock) one fake
// clock, such as storetest.Clock's Now. A Redis store decides by the Redis
// server's TIME.
func WithClock(now func() time.Time) Option {
	return setting(now == nil, "clock is nil", func(l *Limiter) { l.clock = now })
}
