package promlimit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/core"
)

// DefaultNamespace prefixes every metric name unless WithNamespace gives
// another.
const DefaultNamespace = "sluice"

// defaultLatencyBuckets backs DefaultLatencyBuckets.
var defaultLatencyBuckets = [...]float64{
	0.00005, 0.0001, 0.00025, 0.0005,
	0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1,
}

// DefaultLatencyBuckets returns the store latency histogram's default upper
// bounds, in seconds: 50µs, 100µs, 250µs, 500µs, 1ms, 2.5ms, 5ms, 10ms,
// 25ms, 50ms, 100ms, 250ms and 1s; from the memory store or a Redis on the
// same host to well past core.DefaultTimeout (100ms), which is among them so
// that timeouts land in the last buckets. Each call returns a new slice:
// changing it changes nothing else.
func DefaultLatencyBuckets() []float64 { return append([]float64(nil), defaultLatencyBuckets[:]...) }

// ErrInvalidOption is wrapped by every error New returns for a bad option.
var ErrInvalidOption = errors.New("promlimit: invalid option")

// Label values that name no limit, plan or ordinary outcome.
const (
	// LimitNone is the limit label of decisions no store made (the Event's
	// Limit is the zero core.Limit): skipped requests, key errors under
	// KeyErrorDeny or KeyErrorAllow, FailOpen, FailClosed and canceled
	// requests.
	LimitNone = "none"
	// PlanNone is the plan label of requests of no plan: the Limiter has no
	// plans (core.WithPlans), or the request's plan is "" or unknown and
	// the Limiter's own limits decided. It is empty, which Prometheus also
	// reads as the label being absent; it cannot clash with a plan's name,
	// which is never empty.
	PlanNone = ""
	// OutcomeFallbackAllowed and OutcomeFallbackDenied are the outcome
	// labels of core.OutcomeFallback decisions (the store failed and the
	// local fallback store decided) that the local store allowed (served,
	// or held under a LeakyBucket) and denied (refused, or served anyway in
	// shadow mode).
	OutcomeFallbackAllowed = "fallback_allowed"
	OutcomeFallbackDenied  = "fallback_denied"
)

// Values of the kind label of store_errors_total.
const (
	KindTimeout     = "timeout"      // the per-decision deadline passed
	KindCanceled    = "canceled"     // the request's context ended first
	KindBreakerOpen = "breaker_open" // the store was not called: its error wraps core.ErrBreakerOpen
	KindError       = "error"        // any other error from the store
	KindOOM         = "oom"          // the store had no memory left to write: its error wraps core.ErrOutOfMemory
)

var kinds = [...]string{KindTimeout, KindCanceled, KindBreakerOpen, KindError, KindOOM}

const (
	kindTimeout = iota
	kindCanceled
	kindBreakerOpen
	kindError
	kindOOM
)

// numOutcomes is the number of outcomes core defines. Observe caches a
// counter for each, and one more for fallback_denied (outcomeFallbackDenied);
// a later outcome still counts, through the slower path.
const (
	numOutcomes           = int(core.OutcomeCanceled) + 1
	outcomeFallbackDenied = numOutcomes
	numOutcomeLabels      = numOutcomes + 1
)

// outcomeLabels are the outcome label values by outcomeIndex.
var outcomeLabels = func() [numOutcomeLabels]string {
	var ls [numOutcomeLabels]string
	for o := 0; o < numOutcomes; o++ {
		ls[o] = core.Outcome(o).String()
	}
	ls[core.OutcomeFallback] = OutcomeFallbackAllowed
	ls[outcomeFallbackDenied] = OutcomeFallbackDenied
	return ls
}()

// Collector is a prometheus.Collector of Limiter decisions (see the package
// documentation for the metrics). Create it with New, which registers it,
// and pass its Observe method to core.WithObserver; one Collector serves
// any number of Limiters, told apart by name.
//
// There is no useful zero value. A Collector is safe for concurrent use:
// Observe is called on the request goroutines of every Limiter it observes.
type Collector struct {
	decisions   *prometheus.CounterVec
	latency     *prometheus.HistogramVec
	storeErrors *prometheus.CounterVec
	warnings    *prometheus.CounterVec // StoreWarning

	// limiters maps a limiter name to its cached metric children, and
	// labels a limit to its label. Both are copied on write (under mu), so
	// the read path takes no lock.
	limiters atomic.Pointer[map[string]*limiterState]
	labels   atomic.Pointer[map[core.Limit]string]
	mu       sync.Mutex
}

// limiterState caches one limiter's metric children.
type limiterState struct {
	name    string
	latency prometheus.Observer
	errs    [len(kinds)]prometheus.Counter

	sets atomic.Pointer[map[setKey]*outcomeSet] // copied on write, under mu
	mu   sync.Mutex
}

// setKey names the decisions_total children of one limiter that share a
// plan and a binding limit.
type setKey struct {
	plan  string
	limit core.Limit // the zero Limit when no store decided
}

// outcomeSet holds the decisions_total children of one limiter, plan and
// limit, one per outcome label, created on first use.
type outcomeSet struct {
	plan, limit string // label values
	counters    [numOutcomeLabels]atomic.Pointer[counterBox]
}

type counterBox struct{ prometheus.Counter }

// Option configures New.
type Option interface {
	apply(*config) error
}

type optionFunc func(*config) error

func (f optionFunc) apply(c *config) error { return f(c) }

type config struct {
	namespace   string
	buckets     []float64
	constLabels prometheus.Labels
}

// WithNamespace sets the prefix of every metric name (DefaultNamespace,
// "sluice", by default); "" leaves the names unprefixed. It must be a
// classic Prometheus metric name: ASCII letters, digits, '_' and ':', not
// starting with a digit.
func WithNamespace(ns string) Option {
	return optionFunc(func(c *config) error {
		if ns != "" && !validName(ns, true) {
			return fmt.Errorf("%w: namespace %q is not a valid metric name", ErrInvalidOption, ns)
		}
		c.namespace = ns
		return nil
	})
}

// validName reports whether s is a classic Prometheus metric name (colon
// true) or label name: [a-zA-Z_:][a-zA-Z0-9_:]*, without ':' for labels.
func validName(s string, colon bool) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' ||
			c >= '0' && c <= '9' && i > 0 || c == ':' && colon
		if !ok {
			return false
		}
	}
	return true
}

// WithLatencyBuckets sets the upper bounds, in seconds, of the store latency
// histogram's buckets (DefaultLatencyBuckets by default). They must be
// strictly increasing; the +Inf bucket is implicit.
func WithLatencyBuckets(buckets ...float64) Option {
	return optionFunc(func(c *config) error {
		if len(buckets) == 0 {
			return fmt.Errorf("%w: no latency buckets", ErrInvalidOption)
		}
		for i, b := range buckets {
			if math.IsNaN(b) {
				return fmt.Errorf("%w: latency bucket %d is NaN", ErrInvalidOption, i)
			}
			if i > 0 && b <= buckets[i-1] {
				return fmt.Errorf("%w: latency buckets must be strictly increasing: %g follows %g",
					ErrInvalidOption, b, buckets[i-1])
			}
		}
		c.buckets = append([]float64(nil), buckets...)
		return nil
	})
}

// WithConstLabels adds labels with fixed values to every metric, for
// instance the service or the instance's zone. Their names must be classic
// Prometheus label names ([a-zA-Z_][a-zA-Z0-9_]*, not starting with "__")
// other than the Collector's own labels (limiter, plan, limit, outcome,
// kind) and le; values must be valid UTF-8.
func WithConstLabels(labels prometheus.Labels) Option {
	return optionFunc(func(c *config) error {
		for name, v := range labels {
			switch {
			case !validName(name, false) || strings.HasPrefix(name, "__"):
				return fmt.Errorf("%w: constant label name %q is not a valid label name", ErrInvalidOption, name)
			case reservedLabel(name):
				return fmt.Errorf("%w: constant label %q is reserved", ErrInvalidOption, name)
			case !utf8.ValidString(v):
				return fmt.Errorf("%w: constant label %s: value %q is not valid UTF-8", ErrInvalidOption, name, v)
			}
		}
		if c.constLabels == nil {
			c.constLabels = prometheus.Labels{}
		}
		for name, v := range labels {
			c.constLabels[name] = v
		}
		return nil
	})
}

// New returns a Collector and registers it with reg
// (prometheus.DefaultRegisterer when reg is nil). It fails for a bad option
// and when registration fails, for instance because a Collector with the
// same namespace and constant labels is already registered with reg (the
// error then wraps a prometheus.AlreadyRegisteredError).
func New(reg prometheus.Registerer, opts ...Option) (*Collector, error) {
	cfg := config{namespace: DefaultNamespace, buckets: DefaultLatencyBuckets()}
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt.apply(&cfg); err != nil {
			return nil, err
		}
	}
	c := &Collector{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace:   cfg.namespace,
			Name:        "decisions_total",
			Help:        "Rate-limit decisions, by limiter, plan, binding limit and outcome.",
			ConstLabels: cfg.constLabels,
		}, []string{"limiter", "plan", "limit", "outcome"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace:   cfg.namespace,
			Name:        "store_latency_seconds",
			Help:        "Time spent in the rate-limit store per decision that called one (including the local fallback store).",
			ConstLabels: cfg.constLabels,
			Buckets:     cfg.buckets,
		}, []string{"limiter"}),
		storeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace:   cfg.namespace,
			Name:        "store_errors_total",
			Help:        "Decisions whose store failed or was not called because the circuit breaker was open, by kind (timeout, canceled, breaker_open, error, oom).",
			ConstLabels: cfg.constLabels,
		}, []string{"limiter", "kind"}),
		warnings: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace:   cfg.namespace,
			Name:        "store_warnings_total",
			Help:        "Warnings of a store that it may lose rate-limit state, by kind (eviction, restart, unchecked).",
			ConstLabels: cfg.constLabels,
		}, []string{"kind"}),
	}
	c.limiters.Store(&map[string]*limiterState{})
	c.labels.Store(&map[core.Limit]string{})
	if reg == nil {
		reg = prometheus.DefaultRegisterer
	}
	if err := reg.Register(c); err != nil {
		return nil, fmt.Errorf("promlimit: registering the collector: %w", err)
	}
	return c, nil
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	c.decisions.Describe(ch)
	c.latency.Describe(ch)
	c.storeErrors.Describe(ch)
	c.warnings.Describe(ch)
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	c.decisions.Collect(ch)
	c.latency.Collect(ch)
	c.storeErrors.Collect(ch)
	c.warnings.Collect(ch)
}

// StoreWarning counts one warning of a store that it may lose rate-limit
// state, under store_warnings_total{kind}. Pass it the Kind of each
// redisstore.Warning ("eviction", "restart", "unchecked"), alongside a log:
//
//	redisstore.WithWarnings(func(w redisstore.Warning) {
//		slog.Warn(w.String())
//		metrics.StoreWarning(w.Kind)
//	})
//
// kind should come from such a small fixed set: each value is a series.
// It is safe for concurrent use.
func (c *Collector) StoreWarning(kind string) {
	c.warnings.WithLabelValues(labelValue(kind)).Inc()
}

// reservedLabel reports whether name is one of the Collector's own label
// names, which WithConstLabels may not use.
func reservedLabel(name string) bool {
	switch name {
	case "limiter", "plan", "limit", "outcome", "kind", "le":
		return true
	}
	return false
}

// Observe records one decision. Pass it to core.WithObserver. It is safe
// for concurrent use and does not allocate once the Event's limiter, plan,
// limit and outcome label have been seen together.
func (c *Collector) Observe(ev core.Event) {
	ls := c.limiter(ev.Limiter)
	if ev.Latency > 0 {
		ls.latency.Observe(ev.Latency.Seconds())
	}
	if ev.Err != nil {
		if k, ok := errorKind(ev.Err); ok {
			ls.errs[k].Inc()
		}
	}
	c.decision(ls, ev).Inc()
}

// errorKind classifies Event.Err; ok is false for an error that is not the
// store's (a negative cost from the cost function).
func errorKind(err error) (kind int, ok bool) {
	switch {
	case errors.Is(err, core.ErrBreakerOpen):
		return kindBreakerOpen, true
	case errors.Is(err, core.ErrOutOfMemory):
		return kindOOM, true
	case errors.Is(err, context.DeadlineExceeded):
		return kindTimeout, true
	case errors.Is(err, context.Canceled):
		return kindCanceled, true
	case errors.Is(err, core.ErrNegativeCost):
		return 0, false
	}
	return kindError, true
}

// outcomeIndex returns the index of ev's outcome label in outcomeLabels;
// numOutcomeLabels or more for an outcome core does not define yet.
func outcomeIndex(ev core.Event) int {
	if ev.Outcome == core.OutcomeFallback && !ev.Result.Allowed {
		return outcomeFallbackDenied
	}
	if int(ev.Outcome) >= numOutcomes {
		return numOutcomeLabels + int(ev.Outcome)
	}
	return int(ev.Outcome)
}

// limiter returns the cached children of the limiter named name, creating
// them on first use.
func (c *Collector) limiter(name string) *limiterState {
	if ls := (*c.limiters.Load())[name]; ls != nil {
		return ls
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	old := *c.limiters.Load()
	if ls := old[name]; ls != nil {
		return ls
	}
	label := labelValue(name)
	ls := &limiterState{name: label, latency: c.latency.WithLabelValues(label)}
	for i, k := range kinds {
		ls.errs[i] = c.storeErrors.WithLabelValues(label, k)
	}
	ls.sets.Store(&map[setKey]*outcomeSet{})
	storeWith(&c.limiters, name, ls)
	return ls
}

// labelValue returns s as a label value: client_golang panics on invalid
// UTF-8, which an Event not made by a Limiter may hold.
func labelValue(s string) string { return strings.ToValidUTF8(s, "\uFFFD") }

// decision returns the decisions_total child of ls for ev's plan, limit
// and outcome label.
func (c *Collector) decision(ls *limiterState, ev core.Event) prometheus.Counter {
	key := setKey{plan: ev.Plan, limit: ev.Limit}
	set := (*ls.sets.Load())[key]
	if set == nil {
		set = ls.addSet(key, c.limitLabel(ev.Limit))
	}
	o := outcomeIndex(ev)
	if o >= numOutcomeLabels {
		return c.decisions.WithLabelValues(ls.name, set.plan, set.limit, ev.Outcome.String())
	}
	if b := set.counters[o].Load(); b != nil {
		return b.Counter
	}
	b := &counterBox{c.decisions.WithLabelValues(ls.name, set.plan, set.limit, outcomeLabels[o])}
	// Concurrent first uses may both store: they hold the same child.
	set.counters[o].Store(b)
	return b.Counter
}

// addSet adds the outcome set of key, whose limit label is limit, to ls.
func (ls *limiterState) addSet(key setKey, limit string) *outcomeSet {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	old := *ls.sets.Load()
	if set := old[key]; set != nil {
		return set
	}
	set := &outcomeSet{plan: labelValue(key.plan), limit: limit}
	storeWith(&ls.sets, key, set)
	return set
}

// limitLabel returns the limit label of l, cached per Limit value.
func (c *Collector) limitLabel(l core.Limit) string {
	if s, ok := (*c.labels.Load())[l]; ok {
		return s
	}
	s := labelValue(limitString(l))
	c.mu.Lock()
	defer c.mu.Unlock()
	storeWith(&c.labels, l, s)
	return s
}

// storeWith replaces p's map with a copy that also maps k to v: readers
// load the map without a lock, and a map once stored never changes. The
// caller holds the mutex that serialises p's writers.
func storeWith[K comparable, V any](p *atomic.Pointer[map[K]V], k K, v V) {
	old := *p.Load()
	m := make(map[K]V, len(old)+1)
	for key, val := range old {
		m[key] = val
	}
	m[k] = v
	p.Store(&m)
}

// limitString is l in ParseLimit's syntax with the algorithm and burst
// defaults applied, so that equal limits get equal labels however they
// were written ("10/s gcra burst 10"); LimitNone for the zero Limit, and
// l.String() for an invalid one (from an Event no Limiter made).
func limitString(l core.Limit) string {
	if l == (core.Limit{}) {
		return LimitNone
	}
	s, err := l.Spec()
	if err != nil {
		return l.String()
	}
	return core.Limit{
		Algorithm: s.Algorithm(), Rate: l.Rate, Period: l.Period, Burst: s.Burst(), Penalty: l.Penalty,
	}.String()
}
