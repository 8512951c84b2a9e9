package core

import (
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/internal/storekey"
)

// Limiter applies a set of limits to HTTP requests: it identifies the
// client with a KeyFunc, charges the request's cost against every limit in
// a store.Store, and turns the store's Result into a Decision that an HTTP adapter
// (nethttp, ginlimit, echolimit) carries out.
//
// Give each route or group of routes its own Limiter, with its own name:
// the name namespaces the store keys, so Limiters of different names never
// share state. Limiters of one name and limits on one store, in one
// process or several, share state on purpose: that is how several
// instances of a service enforce one limit together.
//
// When the store fails or is slower than the per-decision timeout, the
// failure policy decides (FailLocal by default: a local memory store with
// the same limits). Failing fast while the store is away is the store's
// job, shared by every Limiter on it (the Redis store has a circuit breaker
// per server; see the redisstore package). A request whose key cannot be
// extracted follows the key-error rule; it never skips limiting silently.
// The client never sees a 500 or an error text from the Limiter.
//
// There is no useful zero value: create Limiters with New. A Limiter is
// safe for concurrent use by multiple goroutines. Its limits can be
// replaced while it serves (SetLimits); the rest of its configuration is
// fixed at construction.
type Limiter struct {
	store     store.Store
	key       KeyFunc
	name      string
	keyPrefix string // injective namespace: storekey.Prefix(name)
	// keylessPrefix is the namespace of requests without a key:
	// storekey.KeylessPrefix(name), which no key reaches (see keylessKey).
	keylessPrefix string

	cost     int64
	costFunc func(*http.Request) int64
	skip     func(*http.Request) bool
	countIf  func(status int) bool // nil: every request counts

	policy   FailurePolicy
	fallback store.Store    // WithFallbackStore's, or the store itself; nil: shared's
	shared   *localFallback // FailLocal on a store other than a memory store
	timeout  time.Duration  // 0: no limiter deadline
	local    bool           // store is a *memorystore.Store: no deadline needed

	keyRule KeyErrorRule
	// policyName and planPolicyNames name the IETF policies; see
	// WithPolicyName.
	policyName      string
	planPolicyNames map[string]string
	addrKey         KeyFunc // WithKeyErrorKey; nil: the peer address
	shadow          bool
	observers       []func(Event)
	clock           func() time.Time
	deny            Response
	unavailable     Response
	keyDenied       Response

	style HeaderStyle
	// cfg is the limits in force for requests of no plan: Decide loads it
	// (or the request's plan's) once per request, and SetLimits replaces it
	// (under mu) without ever modifying one.
	cfg atomic.Pointer[limiterConfig]
	// planOf names a request's plan (nil: no plans); plans holds the
	// plans' configs, replaced as a whole (under mu) by SetPlans.
	planOf func(*http.Request) string
	plans  atomic.Pointer[planConfigs]
	mu     sync.Mutex

	keyErrLogged atomic.Bool // the first key error was logged (logKeyError)
}

// DefaultTimeout is the per-decision deadline for a store call when
// WithTimeout is not given. A healthy Redis answers in well under a
// millisecond on a LAN and in a few milliseconds across zones; 100ms leaves
// room for a GC pause or a retransmit without tripping the failure policy,
// while a dead store costs at most this much per request until the store's
// circuit breaker opens (and nothing afterwards).
const DefaultTimeout = 100 * time.Millisecond

// MinTimeout is the smallest per-decision deadline WithTimeout accepts
// (other than 0, no deadline): a shorter one could not reach even a Redis
// on the same host, and every decision would follow the failure policy.
const MinTimeout = time.Millisecond

// Errors reported to observers (Event.Err) and by New.
var (
	// ErrInvalidOption is wrapped by every error New returns for a bad
	// argument or option, except an invalid Limit: that error (from New
	// or SetLimits) wraps ErrInvalidLimit and says which limit.
	ErrInvalidOption = errors.New("sluice: invalid limiter option")

	// errHeld: the local fallback decides a key it admitted while the
	// store was away, for a moment after the store is back (settleHold).
	errHeld = errors.New("sluice: held by the local fallback while its debts settle")

	errEmptyKey     = fmt.Errorf("%w: the key function returned an empty key and no error", ErrNoKey)
	errNegativeCost = fmt.Errorf("%w: the cost function returned a negative cost; the default cost was charged", store.ErrNegativeCost)
)

// New returns a Limiter named name that charges each request against
// limits, for the client key identifies, in the store s (memorystore.New()
// for one process, redisstore.New for several). The name namespaces the
// store keys and is reported to observers, never to clients; it must be 1
// to 128 printable ASCII characters, stable across deployments. s, key
// and at least one limit are required: a nil s, or an interface holding a nil pointer (say a nil
// *memorystore.Store), is an error wrapping ErrInvalidOption; every limit
// is validated. Options set the rest; see Option.
func New(s store.Store, name string, key KeyFunc, limits []store.Limit, opts ...Option) (*Limiter, error) {
	if err := checkStore("store", s); err != nil {
		return nil, err
	}
	if err := checkName("name", name); err != nil {
		return nil, err
	}
	if key == nil {
		return nil, fmt.Errorf("%w: key function is nil", ErrInvalidOption)
	}
	specs, err := specsOf(limits)
	if err != nil {
		return nil, err
	}
	l := &Limiter{
		store:       s,
		name:        name,
		key:         key,
		cost:        1,
		timeout:     DefaultTimeout,
		deny:        defaultDenyResponse,
		unavailable: defaultUnavailableResponse,
		keyDenied:   defaultKeyDeniedResponse,
		style:       HeadersLegacy,
	}
	plans, err := l.apply(opts)
	if err != nil {
		return nil, err
	}
	if err := l.checkReleasers(specs); err != nil {
		return nil, err
	}
	if err := l.checkRefunders(); err != nil {
		return nil, err
	}
	l.cfg.Store(l.newConfig("", limits, specs, nil))
	if l.planOf != nil {
		if err := l.SetPlans(plans); err != nil {
			return nil, err
		}
	}
	if l.policy == FailLocal && !l.local {
		l.useFallback()
		if l.fallback != nil {
			l.shared.adopt(l.fallback)
		}
	}
	return l, nil
}

// apply applies opts to l, a Limiter New is making, and sets what follows
// from them; it returns the plans given with WithPlans.
func (l *Limiter) apply(opts []Option) (map[string][]store.Limit, error) {
	var plans map[string][]store.Limit
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt.applyLimiter(&options{l: l, style: &l.style, plans: &plans}); err != nil {
			return nil, err
		}
	}
	_, l.local = l.store.(*memorystore.Store)
	if l.policy == FailLocal && l.local && l.fallback == nil {
		l.fallback = l.store // only fails for a gone client; a second one would too
	}
	l.keyPrefix = storekey.Prefix(l.name)
	l.keylessPrefix = storekey.KeylessPrefix(l.name)
	return plans, nil
}

// checkRefunders reports, for a Limiter with WithCountIf, a store or a
// local fallback store that cannot give a charge back.
func (l *Limiter) checkRefunders() error {
	if l.countIf == nil {
		return nil
	}
	if _, ok := l.store.(store.Refunder); !ok {
		return fmt.Errorf("%w: WithCountIf needs a store that can give a charge back (a store.Refunder); %T is not one", ErrInvalidOption, l.store)
	}
	if _, ok := l.fallback.(store.Refunder); l.policy == FailLocal && l.fallback != nil && !ok {
		return fmt.Errorf("%w: WithCountIf needs a fallback store that can give a charge back (a store.Refunder); %T is not one", ErrInvalidOption, l.fallback)
	}
	return nil
}

// specsOf validates limits, as New and SetLimits do.
func specsOf(limits []store.Limit) ([]store.Spec, error) {
	if len(limits) == 0 {
		return nil, fmt.Errorf("%w: %w", ErrInvalidOption, store.ErrNoLimits)
	}
	specs := make([]store.Spec, len(limits))
	for i, lim := range limits {
		s, err := lim.Spec()
		if err != nil {
			return nil, fmt.Errorf("limit %d: %w", i, err)
		}
		specs[i] = s
	}
	return specs, nil
}

// Name returns the Limiter's name, as given to New.
func (l *Limiter) Name() string { return l.name }

// Limits returns a copy of the limits the Limiter enforces, as given to
// New or to the last SetLimits.
func (l *Limiter) Limits() []store.Limit { return append([]store.Limit(nil), l.cfg.Load().limits...) }

func (l *Limiter) now() time.Time {
	if l.clock != nil {
		return l.clock()
	}
	return time.Now()
}
