package core

import (
	"fmt"
	"net/http"
	"strconv"

	"github.com/sluicehq/sluice/core/store"
)

// An Option configures a Limiter in New. Options are applied in order; a
// later option overrides an earlier one of the same kind, except
// WithObserver, which adds.
type Option interface {
	applyLimiter(*options) error
}

// optionFunc adapts a function to Option.
type optionFunc func(*options) error

func (f optionFunc) applyLimiter(o *options) error { return f(o) }

// options is what an Option sees: the Limiter under construction and the
// settings New resolves after all options are applied.
type options struct {
	l     *Limiter
	style *HeaderStyle
	plans *map[string][]store.Limit
}

// maxNameLength bounds the length of a Limiter's or a plan's name.
const maxNameLength = 128

// DefaultPolicyName names the IETF RateLimit policies of a Limiter without
// WithPolicyName: a name that tells clients nothing of the deployment.
const DefaultPolicyName = "default"

// WithPolicyName sets the name the IETF RateLimit and RateLimit-Policy
// fields give the Limiter's policies (HeadersIETF): clients see it, so it
// should say what the limit is to them ("api", "uploads"), never how the
// deployment is organised. Without it the policies are named
// DefaultPolicyName, whatever the Limiter's name and plans
// (WithPlans), which stay internal; WithPlanPolicyNames names plans. The
// name must be 1 to 128 printable ASCII characters.
func WithPolicyName(name string) Option {
	return optionFunc(func(o *options) error {
		if err := checkName("policy name", name); err != nil {
			return err
		}
		o.l.policyName = name
		return nil
	})
}

// WithPlanPolicyNames sets the IETF policy name of the plans it names
// (plan → name shown to clients, as WithPolicyName): a request of plan p
// gets names[p]; a plan without an entry gets the Limiter's policy name.
// Plan names (WithPlans) are never shown. Each name must be 1 to 128
// printable ASCII characters.
func WithPlanPolicyNames(names map[string]string) Option {
	return optionFunc(func(o *options) error {
		out := make(map[string]string, len(names))
		for plan, name := range names {
			if err := checkName("policy name of plan "+strconv.Quote(plan), name); err != nil {
				return err
			}
			out[plan] = name
		}
		o.l.planPolicyNames = out
		return nil
	})
}

// checkName reports a name (of a Limiter or a plan) that is not 1 to
// maxNameLength printable ASCII characters.
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

// WithCost sets what every request costs, in units of the limits' Rate.
// The default is 1. A cost of 0 charges nothing: the request is decided on
// the current state (a peek) and gets the headers. A cost larger than a
// limit's burst can never pass; such requests are denied without
// Retry-After.
func WithCost(n int64) Option {
	return optionFunc(func(o *options) error {
		if n < 0 {
			return fmt.Errorf("%w: cost %d: %w", ErrInvalidOption, n, store.ErrNegativeCost)
		}
		o.l.cost = n
		return nil
	})
}

// WithCostFunc computes each request's cost, overriding WithCost. If f
// returns a negative number, the WithCost cost (default 1) is charged and
// the event reports an error wrapping ErrNegativeCost. f is called once per
// request that is not skipped and whose key is not refused; it must be safe
// for concurrent use.
func WithCostFunc(f func(*http.Request) int64) Option {
	return optionFunc(func(o *options) error {
		if f == nil {
			return fmt.Errorf("%w: cost function is nil", ErrInvalidOption)
		}
		o.l.costFunc = f
		return nil
	})
}

// WithSkip exempts requests for which f returns true (an allow-list,
// health checks): they are served without calling the key function or the
// store, get no rate-limit headers, and are observed as OutcomeSkipped. f
// runs first on every request; it must be cheap and safe for concurrent
// use.
func WithSkip(f func(*http.Request) bool) Option {
	return optionFunc(func(o *options) error {
		if f == nil {
			return fmt.Errorf("%w: skip function is nil", ErrInvalidOption)
		}
		o.l.skip = f
		return nil
	})
}

// WithCountIf counts a request only when count returns true for the
// status its handler wrote: WithCountIf(func(s int) bool { return s >= 400 })
// counts failed logins only. Every request is charged up front as usual,
// so that concurrent attempts are limited exactly; once the handler has
// written its status, the adapter calls Decision.Done and, when count
// returns false, the charge is given back to the store (see
// store.Refunder and ALGORITHMS.md for what each algorithm gives back).
// Requests that are served hold their units while in flight: a burst of
// concurrent successful requests can be refused until some complete.
// A give-back that fails (the store is down) is reported to observers as
// OutcomeGiveBackFailed and leaves the charge in place; a penalty lock
// is never set nor lifted by a give-back.
//
// The store, and under FailLocal the fallback store, must implement
// store.Refunder (the memory and Redis stores do): New fails otherwise.
// count is called once per charged request after its handler; it must be
// safe for concurrent use.
func WithCountIf(count func(status int) bool) Option {
	return optionFunc(func(o *options) error {
		if count == nil {
			return fmt.Errorf("%w: count function is nil", ErrInvalidOption)
		}
		o.l.countIf = count
		return nil
	})
}

// FailurePolicy is what a Limiter does when its store fails (an error,
// the store's timeout, an open circuit breaker). The policy travels with
// each call (store.NoFallback), so Limiters on one store may differ.
type FailurePolicy uint8

const (
	// FailLocal lets the store decide locally when its backend fails, if
	// it can: the Redis store's fallback (on by default, see
	// redisstore.WithFallback) starts from Redis' last answer for the key,
	// takes this instance's share of it, and charges what it admitted to
	// Redis once it answers again. Such decisions are OutcomeFallback,
	// with the local result's headers. A store that cannot decide (no
	// fallback, or its local store failed too): the request is served
	// (OutcomeFailedOpen). It is the default.
	FailLocal FailurePolicy = iota
	// FailOpen serves the request unlimited, without rate-limit headers;
	// the store's fallback is not used.
	FailOpen
	// FailClosed refuses the request with the unavailable response
	// (default 503, see WithUnavailableResponse), without rate-limit
	// headers; the store's fallback is not used.
	FailClosed
)

var failurePolicyNames = [...]string{FailLocal: "local", FailOpen: "open", FailClosed: "closed"}

func (p FailurePolicy) String() string {
	return enumString(failurePolicyNames[:], "FailurePolicy", uint8(p))
}

// WithFailurePolicy sets what happens when the store fails; see
// FailurePolicy. The default is FailLocal.
func WithFailurePolicy(p FailurePolicy) Option {
	return optionFunc(func(o *options) error {
		if int(p) >= len(failurePolicyNames) {
			return fmt.Errorf("%w: unknown failure policy %d", ErrInvalidOption, uint8(p))
		}
		o.l.policy = p
		return nil
	})
}

// WithObserver adds f to the functions called with an Event for every
// decision, for logs and metrics. Observers run synchronously on the
// request's goroutine, in the order given: they must be quick and safe for
// concurrent use, and must not retain Event.Request after returning.
func WithObserver(f func(Event)) Option {
	return optionFunc(func(o *options) error {
		if f == nil {
			return fmt.Errorf("%w: observer is nil", ErrInvalidOption)
		}
		o.l.observers = append(o.l.observers, f)
		return nil
	})
}

// WithShadow puts the Limiter in shadow mode, to try limits out in
// production: requests are decided and charged as usual and get the
// rate-limit headers (but no Retry-After), and observers see the real
// outcome (OutcomeShadowDenied for a denial), but every request is served
// at once: nothing is refused or held, whatever the store, the failure
// policy or the key-error rule says.
func WithShadow() Option {
	return optionFunc(func(o *options) error {
		o.l.shadow = true
		return nil
	})
}

// WithHeaders selects the rate-limit response headers; see HeaderStyle.
// The default is HeadersLegacy.
func WithHeaders(style HeaderStyle) Option {
	return optionFunc(func(o *options) error {
		if int(style) >= len(headerStyleNames) {
			return fmt.Errorf("%w: unknown header style %d", ErrInvalidOption, uint8(style))
		}
		*o.style = style
		return nil
	})
}

// KeyErrorRule is what a Limiter does with a request whose key function
// fails (or returns an empty key). Such a request never bypasses limiting
// silently: every rule is explicit and observed.
type KeyErrorRule uint8

const (
	// KeyErrorPerAddress limits requests without a key by their client
	// address: each address has its own bucket, with the Limiter's limits,
	// in a namespace of the Limiter that no key reaches. The address is the
	// one the key function given to WithKeyErrorKey returns (say,
	// keyfuncs.IP with your trusted proxies); without it, or when it fails,
	// the peer's (the request's RemoteAddr: IPv4 by address, IPv6 by /56,
	// 6to4 and Teredo by the IPv4 address they embed, as keyfuncs.IP
	// groups them). Requests with no address at all share one bucket.
	//
	// It is the default: a client that sends garbage tokens spends its own
	// address's allowance, never that of other clients without a key (one
	// bucket for all of them let 25 forged tokens from one client get the
	// next anonymous client denied). Behind proxies, give WithKeyErrorKey
	// the address function that sees through them: by the peer alone,
	// every client behind a proxy shares the proxy's bucket. KeyErrorDeny
	// is no default because it answers 403 before the handler runs, so a
	// client whose token just expired would not get the 401 that makes it
	// refresh its token.
	KeyErrorPerAddress KeyErrorRule = iota
	// KeyErrorDeny refuses requests without a key with the key-error
	// response (default 403 Forbidden, see WithKeyErrorResponse): the
	// request is not over a limit, it is not acceptable at all on this route
	// (say, an API without its API key), so 429 and Retry-After would only
	// invite a pointless retry.
	KeyErrorDeny
	// KeyErrorAllow serves requests without a key unlimited, without
	// rate-limit headers. Observers see OutcomeKeyError.
	KeyErrorAllow
)

var keyErrorRuleNames = [...]string{KeyErrorPerAddress: "per_address", KeyErrorDeny: "deny", KeyErrorAllow: "allow"}

func (k KeyErrorRule) String() string {
	return enumString(keyErrorRuleNames[:], "KeyErrorRule", uint8(k))
}

// WithKeyErrorRule sets the rule for requests whose key function fails; see
// KeyErrorRule. The default is KeyErrorPerAddress.
func WithKeyErrorRule(rule KeyErrorRule) Option {
	return optionFunc(func(o *options) error {
		if int(rule) >= len(keyErrorRuleNames) {
			return fmt.Errorf("%w: unknown key-error rule %d", ErrInvalidOption, uint8(rule))
		}
		o.l.keyRule = rule
		return nil
	})
}

// WithKeyErrorKey sets how KeyErrorPerAddress tells requests without a key
// apart: fn returns the client's address key (keyfuncs.IP with the
// trusted proxies of the deployment, typically). When fn fails or returns
// "", the request is charged by its peer address. Without this option,
// every request without a key is charged by its peer address.
func WithKeyErrorKey(fn KeyFunc) Option {
	return optionFunc(func(o *options) error {
		if fn == nil {
			return fmt.Errorf("%w: WithKeyErrorKey: key function is nil", ErrInvalidOption)
		}
		o.l.addrKey = fn
		return nil
	})
}

func checkResponse(what string, r Response) (Response, error) {
	if r.Status < 200 || r.Status > 599 {
		return Response{}, fmt.Errorf("%w: %s response status %d out of range [200, 599]", ErrInvalidOption, what, r.Status)
	}
	r.Body = append([]byte(nil), r.Body...)
	return r, nil
}

// WithDenyResponse sets the response to a request over the limit. The
// default is 429 Too Many Requests with the JSON body
// {"error":"rate limit exceeded"}. Retry-After and the rate-limit headers
// are set whatever the status.
func WithDenyResponse(resp Response) Option {
	return optionFunc(func(o *options) (err error) {
		o.l.deny, err = checkResponse("deny", resp)
		return err
	})
}

// WithUnavailableResponse sets the response under FailClosed when the
// store is unavailable, and to a held request whose context ends first. The
// default is 503 Service Unavailable with the JSON body
// {"error":"service unavailable"}.
func WithUnavailableResponse(resp Response) Option {
	return optionFunc(func(o *options) (err error) {
		o.l.unavailable, err = checkResponse("unavailable", resp)
		return err
	})
}

// WithKeyErrorResponse sets the response under KeyErrorDeny. The default
// is 403 Forbidden with the JSON body {"error":"forbidden"}.
func WithKeyErrorResponse(resp Response) Option {
	return optionFunc(func(o *options) (err error) {
		o.l.keyDenied, err = checkResponse("key-error", resp)
		return err
	})
}
