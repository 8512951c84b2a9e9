package core

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Limiter applies a set of limits to HTTP requests: it identifies the
// client with a KeyFunc, charges the request's cost against every limit in
// a Store, and turns the store's Result into a Decision that an HTTP adapter
// (nethttp, ginlimit, echolimit) carries out.
//
// Give each route or group of routes its own Limiter, with its own name
// (WithName): the name namespaces the store keys, so limiters that share a
// store never share state. Limiters with the same name, limits and store
// share state on purpose: that is how several instances of a service
// enforce one limit together.
//
// When the store fails or is slower than the per-decision timeout, the
// failure policy decides (FailLocal by default: a local memory store with
// the same limits). A circuit breaker stops calling a store that keeps
// failing and probes it again after a cooldown. A request whose key cannot
// be extracted follows the key-error rule; it never skips limiting silently.
// The client never sees a 500 or an error text from the Limiter.
//
// There is no useful zero value: create Limiters with New. A Limiter is
// safe for concurrent use by multiple goroutines. Its limits can be
// replaced while it serves (SetLimits); the rest of its configuration is
// fixed at construction.
type Limiter struct {
	store     Store
	key       KeyFunc
	name      string
	keyPrefix string // injective namespace: len(name) ":" name ":"

	cost     int64
	costFunc func(*http.Request) int64
	skip     func(*http.Request) bool

	policy   FailurePolicy
	fallback Store
	timeout  time.Duration // 0: no limiter deadline
	local    bool          // store is a *MemoryStore: no deadline needed
	breaker  breaker

	keyRule     KeyErrorRule
	shadow      bool
	observers   []func(Event)
	clock       func() time.Time
	deny        Response
	unavailable Response
	keyDenied   Response

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
}

// DefaultTimeout is the per-decision deadline for a store call when
// WithTimeout is not given. A healthy Redis answers in well under a
// millisecond on a LAN and in a few milliseconds across zones; 100ms leaves
// room for a GC pause or a retransmit without tripping the failure policy,
// while a dead store costs at most this much per request until the circuit
// breaker opens (and nothing afterwards).
const DefaultTimeout = 100 * time.Millisecond

// Default circuit-breaker settings: the breaker opens after this many
// consecutive store failures and probes the store again after the cooldown.
const (
	DefaultBreakerFailures = 5
	DefaultBreakerCooldown = time.Second
)

// Errors reported to observers (Event.Err) and by New.
var (
	// ErrBreakerOpen is the Event.Err of a decision made without calling
	// the store because the circuit breaker is open.
	ErrBreakerOpen = errors.New("sluice: circuit breaker open, store not called")
	// ErrInvalidOption is wrapped by every error New returns for a bad
	// argument or option, except an invalid Limit: that error (from New
	// or SetLimits) wraps ErrInvalidLimit and says which limit.
	ErrInvalidOption = errors.New("sluice: invalid limiter option")

	errEmptyKey     = fmt.Errorf("%w: the key function returned an empty key and no error", ErrNoKey)
	errNegativeCost = fmt.Errorf("%w: the cost function returned a negative cost; the default cost was charged", ErrNegativeCost)
)

// New returns a Limiter that charges each request against limits, for the
// client key identifies, in store. store, key and at least one limit are
// required; every limit is validated. Options set the rest; see Option.
func New(store Store, key KeyFunc, limits []Limit, opts ...Option) (*Limiter, error) {
	if store == nil {
		return nil, fmt.Errorf("%w: store is nil", ErrInvalidOption)
	}
	if key == nil {
		return nil, fmt.Errorf("%w: key function is nil", ErrInvalidOption)
	}
	specs, err := specsOf(limits)
	if err != nil {
		return nil, err
	}
	l := &Limiter{
		store:       store,
		key:         key,
		cost:        1,
		timeout:     DefaultTimeout,
		deny:        defaultDenyResponse,
		unavailable: defaultUnavailableResponse,
		keyDenied:   defaultKeyDeniedResponse,
		breaker:     breaker{threshold: DefaultBreakerFailures, cooldown: DefaultBreakerCooldown},
	}
	style := HeadersLegacy
	var plans map[string][]Limit
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt.applyLimiter(&options{l: l, style: &style, plans: &plans}); err != nil {
			return nil, err
		}
	}
	_, l.local = store.(*MemoryStore)
	if l.policy == FailLocal && l.fallback == nil {
		if l.local {
			l.fallback = store // only fails for a gone client; a second one would too
		} else {
			l.fallback = NewMemoryStore()
		}
	}
	l.keyPrefix = strconv.Itoa(len(l.name)) + ":" + l.name + ":"
	l.style = style
	l.cfg.Store(l.newConfig("", limits, specs, nil))
	if l.planOf != nil {
		if err := l.SetPlans(plans); err != nil {
			return nil, err
		}
	}
	l.watchResets()
	return l, nil
}

// specsOf validates limits, as New and SetLimits do.
func specsOf(limits []Limit) ([]Spec, error) {
	if len(limits) == 0 {
		return nil, fmt.Errorf("%w: %w", ErrInvalidOption, ErrNoLimits)
	}
	specs := make([]Spec, len(limits))
	for i, lim := range limits {
		s, err := lim.Spec()
		if err != nil {
			return nil, fmt.Errorf("limit %d: %w", i, err)
		}
		specs[i] = s
	}
	return specs, nil
}

// limiterConfig is a set of limits in force and what the Limiter derives
// from it. It is never modified once published in Limiter.cfg, so a
// decision sees one consistent set, headers included.
type limiterConfig struct {
	plan    string  // "" for the limits given to New or SetLimits
	limits  []Limit // as given to New, SetLimits or SetPlans
	specs   []Spec
	headers headerPlan // read by Decision.SetHeaders
	// take is what the store is charged: limits, then the guards' limits.
	take   []Limit
	guards []guard
	// expires is the earliest guard's end (zero without guards): from
	// then on Decide replaces the config with one without that guard.
	expires time.Time
}

// A guard keeps a limit that SetLimits replaced by a tighter one in force
// for as long as the state it built up before the swap can matter (its
// horizon), so that tightening a limit does not hand every client the new
// limit's full allowance: see SetLimits.
type guard struct {
	limit     Limit
	spec      Spec
	successor int // index in limiterConfig.limits of the limit that replaced it
	until     time.Time
}

func (l *Limiter) newConfig(plan string, limits []Limit, specs []Spec, guards []guard) *limiterConfig {
	c := &limiterConfig{
		plan:    plan,
		limits:  append([]Limit(nil), limits...),
		specs:   specs,
		headers: newHeaderPlan(l.style, policyName(l.name, plan), specs),
		guards:  guards,
	}
	c.take = c.limits
	if len(guards) > 0 {
		c.take = make([]Limit, 0, len(limits)+len(guards))
		c.take = append(c.take, c.limits...)
		for _, g := range guards {
			c.take = append(c.take, g.limit)
			if c.expires.IsZero() || g.until.Before(c.expires) {
				c.expires = g.until
			}
		}
	}
	return c
}

// SetLimits replaces the limits the Limiter enforces, while it serves.
// limits are validated as in New; on error (wrapping ErrInvalidOption and
// ErrNoLimits, or ErrInvalidLimit) nothing changes. The swap is atomic:
// each decision is made entirely with the old limits or entirely with the
// new ones (limits, store calls and headers alike); decisions in flight
// finish with the limits they started with. SetLimits is safe for
// concurrent use with Decide and with itself (calls are serialized; the
// last one wins). The headers follow the new limits at once, including
// the IETF policies (one per limit, numbered in the new order).
//
// What happens to the state clients built up:
//
//   - A limit that is unchanged keeps its state exactly. Stores key state by
//     the limit's arithmetic (Spec.ID: algorithm, rate, period, burst and
//     penalty after defaults), not by its position, so reordering limits,
//     adding or removing others, or rewriting one in an equivalent form
//     ("100/m" and "100/m gcra burst 100") loses nothing.
//   - A changed limit is a new limit to the store, with fresh state: two
//     different limits never share state (a counter kept for 100/m means
//     something else to 10/m, and to another algorithm nothing at all).
//   - So that tightening a limit does not hand every client the new
//     limit's full allowance, a limit replaced by a tighter one stays in
//     force as a guard until the state built up before the swap no longer
//     matters: the time it takes to refill completely after exhaustion
//     (Burst·Period/Rate for GCRA, TokenBucket and LeakyBucket, Period for
//     FixedWindow and SlidingLog, 2·Period for SlidingWindow) plus its
//     Penalty, from the swap. Meanwhile a request must pass both; a client
//     that had used up the old limit stays refused until the old limit
//     would have let it through, and then gets no more than the new limit.
//     The guard never admits more than the new limit alone would; its
//     figures are folded into the new limit's (Remaining is the smaller,
//     Retry-After the longer), so headers name only the new limits.
//     A limit replaces another when both have the same algorithm and
//     period and no other limit added or removed in the same call has
//     them; it is tighter when its rate or burst is smaller or its penalty
//     longer. A loosened limit (or one changed to another period or
//     algorithm, or simply removed) takes effect at once, with fresh state:
//     a raised quota is not held back by usage counted against the old one.
//
// The guard's horizon is measured by the Limiter's clock (WithClock).
func (l *Limiter) SetLimits(limits []Limit) error {
	specs, err := specsOf(limits)
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	old := l.cfg.Load()
	now := l.now()
	l.cfg.Store(l.newConfig("", limits, specs, guardsFor(old, specs, now)))
	return nil
}

// guardsFor returns the guards of a swap from old to the limits specs: the
// old limits replaced by tighter ones, and old's guards still in force
// whose successor is unchanged.
func guardsFor(old *limiterConfig, specs []Spec, now time.Time) []guard {
	index := make(map[string]int, len(specs)) // Spec.ID → first index in specs
	for i := len(specs) - 1; i >= 0; i-- {
		index[specs[i].ID()] = i
	}
	oldIDs := make(map[string]bool, len(old.specs)+len(old.guards))
	for _, s := range old.specs {
		oldIDs[s.ID()] = true
	}
	var gs []guard
	for _, g := range old.guards {
		if !now.Before(g.until) {
			continue
		}
		if _, again := index[g.spec.ID()]; again {
			continue // enforced as a limit again: charging it twice would count double
		}
		if j, ok := index[old.specs[g.successor].ID()]; ok {
			g.successor = j
			gs = append(gs, g)
		}
	}

	// Pair the removed limits with the added ones of the same algorithm
	// and period, when each side has exactly one.
	type class struct {
		alg    Algorithm
		period int64
	}
	removed := map[class][]int{}
	seen := map[string]bool{}
	for i, s := range old.specs {
		if _, kept := index[s.ID()]; !kept && !seen[s.ID()] {
			seen[s.ID()] = true
			k := class{s.Algorithm, s.Period}
			removed[k] = append(removed[k], i)
		}
	}
	added := map[class][]int{}
	for i, s := range specs {
		if !oldIDs[s.ID()] && index[s.ID()] == i {
			k := class{s.Algorithm, s.Period}
			added[k] = append(added[k], i)
		}
	}
	for i, o := range old.specs {
		k := class{o.Algorithm, o.Period}
		rs, as := removed[k], added[k]
		if len(rs) != 1 || rs[0] != i || len(as) != 1 {
			continue
		}
		n := specs[as[0]]
		if n.Rate < o.Rate || n.Burst < o.Burst || n.Penalty > o.Penalty {
			gs = append(gs, guard{limit: old.limits[i], spec: o, successor: as[0], until: now.Add(horizon(o))})
		}
	}
	return gs
}

// horizon returns how long after its last charge a limit's state can still
// refuse a request: the time to refill completely, plus the penalty.
func horizon(s Spec) time.Duration {
	var us int64
	switch s.Algorithm {
	case GCRA:
		us = s.Burst * s.Interval
	case LeakyBucket:
		us = (s.Burst + 1) * s.Interval
	case TokenBucket:
		us = (s.Burst*s.Period + s.Rate - 1) / s.Rate
	case SlidingWindow:
		us = 2 * s.Period
	default: // FixedWindow, SlidingLog
		us = s.Period
	}
	us += s.Penalty // both below 2^53 (Validate)
	if us > int64(InfDuration/time.Microsecond) {
		return InfDuration
	}
	return time.Duration(us) * time.Microsecond
}

// dropExpiredGuards replaces the config in force for the plan of cfg by
// one without the guards that have ended by now, and returns the config in
// force for that plan.
func (l *Limiter) dropExpiredGuards(cfg *limiterConfig, now time.Time) *limiterConfig {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.configNamed(cfg.plan)
	if c.plan != cfg.plan {
		return cfg // the plan is gone (SetPlans): finish with what it had
	}
	if c.expires.IsZero() || now.Before(c.expires) {
		return c // another decision, SetLimits or SetPlans got here first
	}
	var live []guard
	for _, g := range c.guards {
		if now.Before(g.until) {
			live = append(live, g)
		}
	}
	next := l.newConfig(c.plan, c.limits, c.specs, live)
	l.publish(next)
	return next
}

// fold turns the Result of a Take over cfg.take into one over cfg.limits:
// each guard's result is folded into its successor's (refused if either
// refused, the smaller Remaining, the longer RetryAfter, ResetAfter and
// Delay). Without guards it returns res as is.
func (c *limiterConfig) fold(res Result) Result {
	if len(c.guards) == 0 || len(res.PerLimit) != len(c.take) {
		return res
	}
	n := len(c.limits)
	own := make([]Result, n)
	copy(own, res.PerLimit[:n])
	for i, g := range c.guards {
		gr, s := &res.PerLimit[n+i], &own[g.successor]
		if !gr.Allowed {
			if s.Allowed {
				s.Allowed, s.RetryAfter = false, gr.RetryAfter
			} else {
				s.RetryAfter = max(s.RetryAfter, gr.RetryAfter)
			}
			s.Remaining = 0
		} else {
			s.Remaining = min(s.Remaining, gr.Remaining)
		}
		s.ResetAfter = max(s.ResetAfter, gr.ResetAfter)
		s.Delay = max(s.Delay, gr.Delay)
	}
	return Combine(own)
}

// Name returns the name given with WithName, or "" when there was none.
func (l *Limiter) Name() string { return l.name }

// Limits returns a copy of the limits the Limiter enforces, as given to
// New or to the last SetLimits.
func (l *Limiter) Limits() []Limit { return append([]Limit(nil), l.cfg.Load().limits...) }

// Breaker returns the circuit breaker's current state (BreakerClosed when
// the breaker is disabled).
func (l *Limiter) Breaker() BreakerState { return BreakerState(l.breaker.state.Load()) }

func (l *Limiter) now() time.Time {
	if l.clock != nil {
		return l.clock()
	}
	return time.Now()
}

// Action says what an adapter does with a request.
type Action uint8

const (
	// Serve: call the next handler now.
	Serve Action = iota
	// Hold: wait Decision.Delay (Decision.Wait), then serve. If the wait
	// is cut short by the request's context, write Decision.Response
	// instead.
	Hold
	// Refuse: do not call the next handler; write Decision.Response
	// (Decision.WriteResponse).
	Refuse
)

func (a Action) String() string {
	switch a {
	case Serve:
		return "serve"
	case Hold:
		return "hold"
	case Refuse:
		return "refuse"
	}
	return "action(" + strconv.Itoa(int(a)) + ")"
}

// Outcome is why a Decision was made. The string values are stable and
// suitable as metric labels.
type Outcome uint8

const (
	// OutcomeAllowed: the store admitted the request (in shadow mode, also
	// one it admitted with a delay, which shadow mode does not apply).
	OutcomeAllowed Outcome = iota
	// OutcomeDenied: the store denied the request; it is refused (429).
	OutcomeDenied
	// OutcomeDelayed: the store admitted the request after a delay
	// (LeakyBucket); it is held.
	OutcomeDelayed
	// OutcomeShadowDenied: the store denied the request, and it is served
	// because the Limiter is in shadow mode.
	OutcomeShadowDenied
	// OutcomeFailedOpen: the store failed (or the breaker is open) and the
	// request is served without a decision: FailOpen, or FailLocal when
	// the local store failed too.
	OutcomeFailedOpen
	// OutcomeFailedClosed: the store failed (or the breaker is open) and the
	// request is refused with the unavailable response (503), FailClosed.
	OutcomeFailedClosed
	// OutcomeFallback: the store failed (or the breaker is open) and the
	// local store decided, FailLocal. Result and Action say what it decided.
	OutcomeFallback
	// OutcomeSkipped: the skip function exempted the request; no store was
	// called and no headers are set.
	OutcomeSkipped
	// OutcomeKeyError: the key function failed and the key-error rule is
	// KeyErrorDeny (the request is refused, 403) or KeyErrorAllow (it is
	// served unlimited). Under KeyErrorShared the outcome is the shared
	// bucket's, and Event.KeyErr reports the failure.
	OutcomeKeyError
	// OutcomeCanceled: the request's context ended (the client went away,
	// or a server deadline passed) before the store decided. The request
	// is refused with the unavailable response, which no one may read,
	// whatever the failure policy: serving it would let a client that
	// drops its connections run the handler unlimited. Nothing is charged
	// unless the store charged before the context ended. In shadow mode it
	// is served.
	OutcomeCanceled
)

var outcomeNames = [...]string{
	OutcomeAllowed:      "allowed",
	OutcomeDenied:       "denied",
	OutcomeDelayed:      "delayed",
	OutcomeShadowDenied: "shadow_denied",
	OutcomeFailedOpen:   "failed_open",
	OutcomeFailedClosed: "failed_closed",
	OutcomeFallback:     "fallback",
	OutcomeSkipped:      "skipped",
	OutcomeKeyError:     "key_error",
	OutcomeCanceled:     "canceled",
}

func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return "outcome(" + strconv.Itoa(int(o)) + ")"
}

// Response is a complete HTTP response that an adapter writes instead of
// calling the next handler. An empty ContentType sets no Content-Type
// header. Body is shared between requests: do not modify it.
type Response struct {
	Status      int
	ContentType string
	Body        []byte
}

var (
	defaultDenyResponse = Response{
		Status:      http.StatusTooManyRequests,
		ContentType: "application/json",
		Body:        []byte(`{"error":"rate limit exceeded"}` + "\n"),
	}
	defaultUnavailableResponse = Response{
		Status:      http.StatusServiceUnavailable,
		ContentType: "application/json",
		Body:        []byte(`{"error":"service unavailable"}` + "\n"),
	}
	defaultKeyDeniedResponse = Response{
		Status:      http.StatusForbidden,
		ContentType: "application/json",
		Body:        []byte(`{"error":"forbidden"}` + "\n"),
	}
)

// Decision is what the Limiter decided for one request. Adapters call
// SetHeaders on the response headers first (before the next handler runs,
// so the headers are on every response of a limited route), then act on
// Action. Decision is a small value; it is not retained by the Limiter.
type Decision struct {
	// Action is what the adapter does with the request.
	Action Action
	// Delay is how long to hold the request when Action is Hold.
	Delay time.Duration
	// Outcome is why.
	Outcome Outcome
	// Result is the store's (or the local fallback store's) result. It is
	// the zero Result (Limit 0) when no store decided: skipped requests,
	// key errors under KeyErrorDeny or KeyErrorAllow, FailOpen and
	// FailClosed.
	Result Result

	l    *limiterConfig // the limits it was made with (nil: zero Decision)
	now  time.Time      // when the decision was made, by the Limiter's clock
	resp *Response      // what to write for Refuse, or for a Hold cut short
}

// Response returns what to write when Action is Refuse (the deny response
// for a denial, the unavailable response under FailClosed, the key-error
// response under KeyErrorDeny), or when a Hold is cut short (the
// unavailable response). It is the zero Response for Serve.
func (d Decision) Response() Response {
	if d.resp == nil {
		return Response{}
	}
	return *d.resp
}

// WriteResponse writes Response to w: its Content-Type, status and body.
// Write errors are ignored: they mean the client has gone.
func (d Decision) WriteResponse(w http.ResponseWriter) {
	resp := d.resp
	if resp == nil {
		return
	}
	if resp.ContentType != "" {
		w.Header()["Content-Type"] = []string{resp.ContentType}
	}
	w.WriteHeader(resp.Status)
	if len(resp.Body) > 0 {
		_, _ = w.Write(resp.Body)
	}
}

// Wait holds the caller for Delay when Action is Hold, and returns nil
// once the request may be served. It returns ctx.Err() early if ctx ends
// first (the client has gone, or a server deadline passed); the adapter then
// writes Response (503) instead of serving. For any other Action it
// returns nil at once.
func (d Decision) Wait(ctx context.Context) error {
	if d.Action != Hold || d.Delay <= 0 {
		return nil
	}
	t := time.NewTimer(d.Delay)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Event describes one decision, for logs and metrics. Observers receive it
// synchronously, before Decide returns.
type Event struct {
	Limiter string        // the Limiter's name
	Plan    string        // the plan whose limits decided ("": the Limiter's own; see WithPlans)
	// Limit is the limit that bound the decision (Result.Binding, as given
	// to New, SetLimits or SetPlans), when a store decided; the zero Limit
	// otherwise.
	Limit Limit
	Outcome Outcome       // why
	Action  Action        // what the adapter does
	Request *http.Request // the request decided on
	// Key is what the key function returned ("" when it failed). It may
	// identify a person (an address, a user id): log it with care.
	Key    string
	Cost   int64  // the cost charged (or that would have been)
	Result Result // as in Decision.Result
	// Latency is the time spent in Store.Take (and in the local store,
	// under FailLocal); 0 when no store was called.
	Latency time.Duration
	// Err is what went wrong with the store: its error (a context error
	// when the per-decision timeout passed), or ErrBreakerOpen. It also
	// reports a negative cost from the cost function. nil otherwise.
	Err error
	// KeyErr is the key function's error, when it failed.
	KeyErr error
	// Breaker is the circuit breaker's state after the decision.
	Breaker BreakerState
	// Shadow reports that the Limiter is in shadow mode: Action is then
	// always Serve, whatever Outcome says.
	Shadow bool
}

// Decide makes the decision for one request. Adapters call it once per
// request; it never fails: errors are handled by the failure policy and
// the key-error rule, and reported to observers.
func (l *Limiter) Decide(r *http.Request) Decision {
	cfg := l.cfg.Load()
	if l.skip != nil && l.skip(r) {
		d := Decision{Action: Serve, Outcome: OutcomeSkipped, l: cfg}
		if len(l.observers) > 0 {
			l.observe(Event{Outcome: OutcomeSkipped, Request: r}, &d)
		}
		return d
	}

	key, keyErr := l.key(r)
	if keyErr == nil && key == "" {
		keyErr = errEmptyKey
	}
	var storeKey string
	if keyErr != nil {
		key = ""
		switch l.keyRule {
		case KeyErrorDeny:
			d := Decision{Action: Refuse, Outcome: OutcomeKeyError, l: cfg, resp: &l.keyDenied}
			if l.shadow {
				d.Action, d.resp = Serve, nil
			}
			if len(l.observers) > 0 {
				l.observe(Event{Outcome: OutcomeKeyError, Request: r, KeyErr: keyErr}, &d)
			}
			return d
		case KeyErrorAllow:
			d := Decision{Action: Serve, Outcome: OutcomeKeyError, l: cfg}
			if len(l.observers) > 0 {
				l.observe(Event{Outcome: OutcomeKeyError, Request: r, KeyErr: keyErr}, &d)
			}
			return d
		default: // KeyErrorShared: the namespace itself, which no real key (never empty) maps to
			storeKey = l.keyPrefix
		}
	} else {
		storeKey = l.keyPrefix + key
	}
	// The limits in force for the request's plan, loaded once: a
	// concurrent SetLimits or SetPlans does not change what this decision
	// is made with.
	cfg = l.configFor(r)

	cost := l.cost
	var err error
	if l.costFunc != nil {
		if c := l.costFunc(r); c >= 0 {
			cost = c
		} else {
			err = errNegativeCost
		}
	}

	ctx := r.Context()
	var (
		res      Result
		storeErr error
		latency  time.Duration
	)
	// The clock is read lazily: the breaker needs it only when open or
	// after a failure, the headers once per decision, and the limits only
	// while a changed limit's guard is in force (see SetLimits).
	var now time.Time
	if !cfg.expires.IsZero() {
		now = l.now()
		if !now.Before(cfg.expires) {
			cfg = l.dropExpiredGuards(cfg, now)
		}
	}
	call, probe := l.breaker.allow(l.now)
	if call {
		start := time.Now()
		if l.timeout > 0 && !l.local {
			tctx, cancel := context.WithTimeout(ctx, l.timeout)
			res, storeErr = l.store.Take(tctx, storeKey, cost, cfg.take...)
			cancel()
		} else {
			res, storeErr = l.store.Take(ctx, storeKey, cost, cfg.take...)
		}
		end := time.Now()
		latency = end.Sub(start)
		if l.clock == nil {
			now = end
		}
		// A request whose client went away says nothing about the store.
		l.breaker.done(probe, storeErr != nil, storeErr != nil && ctx.Err() != nil, l.now)
	} else {
		storeErr = ErrBreakerOpen
	}

	d := Decision{l: cfg}
	if storeErr == nil {
		l.fromResult(&d, cfg.fold(res), false)
	} else if err = storeErr; ctx.Err() != nil {
		// The client is gone: no policy serves it (see OutcomeCanceled).
		d.Action, d.Outcome, d.resp = Refuse, OutcomeCanceled, &l.unavailable
		if l.shadow {
			d.Action, d.resp = Serve, nil
		}
	} else {
		switch l.policy {
		case FailOpen:
			d.Action, d.Outcome = Serve, OutcomeFailedOpen
		case FailClosed:
			d.Action, d.Outcome, d.resp = Refuse, OutcomeFailedClosed, &l.unavailable
			if l.shadow {
				d.Action, d.resp = Serve, nil
			}
		default: // FailLocal
			start := time.Now()
			res, lerr := l.fallback.Take(ctx, storeKey, cost, cfg.take...)
			latency += time.Since(start)
			if lerr != nil {
				d.Action, d.Outcome = Serve, OutcomeFailedOpen
			} else {
				l.fromResult(&d, cfg.fold(res), true)
			}
		}
	}
	if now.IsZero() {
		now = l.now()
	}
	d.now = now
	if len(l.observers) > 0 {
		l.observe(Event{
			Request: r, Key: key, Cost: cost, Latency: latency, Err: err, KeyErr: keyErr,
		}, &d)
	}
	return d
}

// fromResult fills d from a store's result.
func (l *Limiter) fromResult(d *Decision, res Result, fallback bool) {
	d.Result = res
	switch {
	case !res.Allowed:
		d.Outcome = OutcomeDenied
		d.Action, d.resp = Refuse, &l.deny
		if l.shadow {
			d.Outcome = OutcomeShadowDenied
			d.Action, d.resp = Serve, nil
		}
	case res.Delay > 0 && !l.shadow:
		d.Outcome = OutcomeDelayed
		d.Action, d.Delay, d.resp = Hold, res.Delay, &l.unavailable
	default:
		d.Outcome = OutcomeAllowed
		d.Action = Serve
	}
	if fallback {
		d.Outcome = OutcomeFallback
	}
}

func (l *Limiter) observe(ev Event, d *Decision) {
	ev.Limiter = l.name
	if d.l != nil {
		ev.Plan = d.l.plan
		if b := d.Result.Binding; d.Result.Limit != 0 && b >= 0 && b < len(d.l.limits) {
			ev.Limit = d.l.limits[b]
		}
	}
	ev.Outcome = d.Outcome
	ev.Action = d.Action
	ev.Result = d.Result
	ev.Breaker = l.Breaker()
	ev.Shadow = l.shadow
	for _, f := range l.observers {
		f(ev)
	}
}
