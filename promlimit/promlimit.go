package promlimit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
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

// DefaultLatencyBuckets are the store latency histogram's upper bounds, in
// seconds: from 50µs (the memory store, a Redis on the same host) to 1s,
// with DefaultTimeout (100ms) among them so that timeouts land in the last
// buckets.
var DefaultLatencyBuckets = []float64{
	0.00005, 0.0001, 0.00025, 0.0005,
	0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1,
}

// ErrInvalidOption is wrapped by every error New returns for a bad option,
// and by SetLimits and Track for a bad argument.
var ErrInvalidOption = errors.New("promlimit: invalid option")

// Label values of the limit label that do not name a limit.
const (
	// LimitNone is the limit label of decisions no store made: skipped
	// requests, key errors under KeyErrorDeny or KeyErrorAllow, FailOpen
	// and FailClosed.
	LimitNone = "none"
)

// Values of the kind label of store_errors_total.
const (
	KindTimeout     = "timeout"      // the per-decision deadline passed
	KindCanceled    = "canceled"     // the request's context ended first
	KindBreakerOpen = "breaker_open" // the store was not called: breaker open
	KindError       = "error"        // any other error from the store
)

var kinds = [...]string{KindTimeout, KindCanceled, KindBreakerOpen, KindError}

const (
	kindTimeout = iota
	kindCanceled
	kindBreakerOpen
	kindError
)

// numOutcomes is the number of outcomes core defines; Observe caches a
// counter for each. A later outcome still counts, through the slower path.
const numOutcomes = int(core.OutcomeCanceled) + 1

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
	breaker     *prometheus.GaugeVec

	// limiters maps a limiter name to its cached metric children. It is
	// copied on write (under mu), so the read path takes no lock.
	limiters atomic.Pointer[map[string]*limiterState]
	mu       sync.Mutex
}

// limiterState caches one limiter's metric children.
type limiterState struct {
	name    string
	breaker prometheus.Gauge
	latency prometheus.Observer
	errs    [len(kinds)]prometheus.Counter

	table atomic.Pointer[limitTable] // replaced by SetLimits, copied on write
	mu    sync.Mutex                 // serializes writers of table
}

// limitTable holds a limiter's decision counters by binding limit.
type limitTable struct {
	labels  []string // limit label by binding index; nil when not known
	figures []int64  // each limit's X-RateLimit-Limit figure, by binding index
	sets    map[limitKey]*outcomeSet
}

// limitKey identifies a binding limit from a Result alone.
type limitKey struct {
	binding int
	figure  int64 // Result.Limit; 0 when no store decided
}

// outcomeSet holds the decisions_total children of one limiter and limit,
// one per outcome, created on first use.
type outcomeSet struct {
	label    string
	counters [numOutcomes]atomic.Pointer[counterBox]
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
	limits      map[string][]core.Limit
	limitOrder  []string
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
// other than the Collector's own labels (limiter, limit, outcome, kind) and
// le; values must be valid UTF-8.
func WithConstLabels(labels prometheus.Labels) Option {
	return optionFunc(func(c *config) error {
		for name, v := range labels {
			switch {
			case !validName(name, false) || strings.HasPrefix(name, "__"):
				return fmt.Errorf("%w: constant label name %q is not a valid label name", ErrInvalidOption, name)
			case name == "limiter" || name == "limit" || name == "outcome" || name == "kind" || name == "le":
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

// WithLimits tells the Collector the limits of the Limiter named limiter,
// in the order given to core.New, so that the limit label names them; it is
// SetLimits at construction. Track does the same from the Limiter itself.
func WithLimits(limiter string, limits ...core.Limit) Option {
	return optionFunc(func(c *config) error {
		if _, _, err := limitLabels(limits); err != nil {
			return err
		}
		if c.limits == nil {
			c.limits = map[string][]core.Limit{}
		}
		if _, seen := c.limits[limiter]; !seen {
			c.limitOrder = append(c.limitOrder, limiter)
		}
		c.limits[limiter] = append([]core.Limit(nil), limits...)
		return nil
	})
}

// New returns a Collector and registers it with reg
// (prometheus.DefaultRegisterer when reg is nil). It fails for a bad option
// and when registration fails, for instance because a Collector with the
// same namespace and constant labels is already registered with reg (the
// error then wraps a prometheus.AlreadyRegisteredError).
func New(reg prometheus.Registerer, opts ...Option) (*Collector, error) {
	cfg := config{namespace: DefaultNamespace, buckets: DefaultLatencyBuckets}
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
			Help:        "Rate-limit decisions, by limiter, binding limit and outcome.",
			ConstLabels: cfg.constLabels,
		}, []string{"limiter", "limit", "outcome"}),
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
			Help:        "Decisions whose store failed or was not called because the circuit breaker was open, by kind (timeout, canceled, breaker_open, error).",
			ConstLabels: cfg.constLabels,
		}, []string{"limiter", "kind"}),
		breaker: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace:   cfg.namespace,
			Name:        "breaker_state",
			Help:        "Circuit-breaker state after the latest decision: 0 closed, 1 open, 2 half-open.",
			ConstLabels: cfg.constLabels,
		}, []string{"limiter"}),
	}
	empty := map[string]*limiterState{}
	c.limiters.Store(&empty)
	for _, name := range cfg.limitOrder {
		if err := c.SetLimits(name, cfg.limits[name]...); err != nil {
			return nil, err // validated by WithLimits already
		}
	}
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
	c.breaker.Describe(ch)
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	c.decisions.Collect(ch)
	c.latency.Collect(ch)
	c.storeErrors.Collect(ch)
	c.breaker.Collect(ch)
}

// Track tells the Collector l's name and limits, so that the limit label
// names l's limits ("10/s gcra burst 10") instead of giving their
// X-RateLimit-Limit figures. It is SetLimits(l.Name(), l.Limits()...): a
// snapshot, so call it again after l.SetLimits.
func (c *Collector) Track(l *core.Limiter) error {
	if l == nil {
		return fmt.Errorf("%w: nil Limiter", ErrInvalidOption)
	}
	return c.SetLimits(l.Name(), l.Limits()...)
}

// SetLimits tells the Collector the limits of the Limiter named limiter, in
// the order given to core.New, so that the limit label names the binding
// limit of each decision in ParseLimit's syntax with defaults spelt out
// ("10/s gcra burst 10", "1000/3s fixed_window penalty 1m"). With no limits
// it forgets them: the label goes back to the X-RateLimit-Limit figure.
//
// An Event names its binding limit by index (Result.Binding), so the
// labels are only as current as the limits given here: a decision whose
// X-RateLimit-Limit figure is not the one of the limit at its index (the
// Limiter's limits were changed and SetLimits not called) is labelled with
// the figure rather than misnamed. Later decisions use the new labels;
// counted ones keep theirs. It fails for an invalid limit. It is safe to
// call while decisions are observed.
func (c *Collector) SetLimits(limiter string, limits ...core.Limit) error {
	labels, figures, err := limitLabels(limits)
	if err != nil {
		return err
	}
	ls := c.limiter(limiter)
	ls.mu.Lock()
	ls.table.Store(&limitTable{labels: labels, figures: figures, sets: map[limitKey]*outcomeSet{}})
	ls.mu.Unlock()
	return nil
}

// limitLabels returns the limit label of each limit, its String with the
// algorithm and burst defaults applied (so that equal limits get equal
// labels however they were written), and its X-RateLimit-Limit figure
// (ALGORITHMS.md: Burst, Burst+1 for LeakyBucket, Rate for the window
// algorithms).
func limitLabels(limits []core.Limit) ([]string, []int64, error) {
	if len(limits) == 0 {
		return nil, nil, nil
	}
	labels := make([]string, len(limits))
	figures := make([]int64, len(limits))
	for i, l := range limits {
		s, err := l.Spec()
		if err != nil {
			return nil, nil, fmt.Errorf("%w: limit %d: %w", ErrInvalidOption, i, err)
		}
		labels[i] = core.Limit{
			Algorithm: s.Algorithm, Rate: l.Rate, Period: l.Period, Burst: s.Burst, Penalty: l.Penalty,
		}.String()
		switch s.Algorithm {
		case core.GCRA, core.TokenBucket:
			figures[i] = s.Burst
		case core.LeakyBucket:
			figures[i] = s.Burst + 1
		default:
			figures[i] = s.Rate
		}
	}
	return labels, figures, nil
}

// Observe records one decision. Pass it to core.WithObserver. It is safe
// for concurrent use and does not allocate once the Event's limiter, limit
// and outcome have been seen.
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
	c.decision(ls, ev.Result, ev.Outcome).Inc()
}

// errorKind classifies Event.Err; ok is false for an error that is not the
// store's (a negative cost from the cost function).
func errorKind(err error) (kind int, ok bool) {
	switch {
	case errors.Is(err, core.ErrBreakerOpen):
		return kindBreakerOpen, true
	case errors.Is(err, context.DeadlineExceeded):
		return kindTimeout, true
	case errors.Is(err, context.Canceled):
		return kindCanceled, true
	case errors.Is(err, core.ErrNegativeCost):
		return 0, false
	}
	return kindError, true
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
	ls := &limiterState{
		name:    name,
		breaker: c.breaker.WithLabelValues(name),
		latency: c.latency.WithLabelValues(name),
	}
	for i, k := range kinds {
		ls.errs[i] = c.storeErrors.WithLabelValues(name, k)
	}
	ls.table.Store(&limitTable{sets: map[limitKey]*outcomeSet{}})
	m := make(map[string]*limiterState, len(old)+1)
	for k, v := range old {
		m[k] = v
	}
	m[name] = ls
	c.limiters.Store(&m)
	return ls
}

// decision returns the decisions_total child for ls, the binding limit of
// res and o.
func (c *Collector) decision(ls *limiterState, res core.Result, o core.Outcome) prometheus.Counter {
	key := limitKey{binding: res.Binding, figure: res.Limit}
	if res.Limit == 0 {
		key = limitKey{binding: -1}
	}
	set := ls.table.Load().sets[key]
	if set == nil {
		set = ls.addSet(key)
	}
	if int(o) >= numOutcomes {
		return c.decisions.WithLabelValues(ls.name, set.label, o.String())
	}
	if b := set.counters[o].Load(); b != nil {
		return b.Counter
	}
	b := &counterBox{c.decisions.WithLabelValues(ls.name, set.label, o.String())}
	// Concurrent first uses may both store: they hold the same child.
	set.counters[o].Store(b)
	return b.Counter
}

// addSet adds the outcome set of key to ls's table.
func (ls *limiterState) addSet(key limitKey) *outcomeSet {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	t := ls.table.Load()
	if set := t.sets[key]; set != nil {
		return set
	}
	var label string
	switch {
	case key.binding < 0:
		label = LimitNone
	case key.binding < len(t.labels) && t.figures[key.binding] == key.figure:
		label = t.labels[key.binding]
	default:
		label = strconv.FormatInt(key.figure, 10)
	}
	set := &outcomeSet{label: label}
	sets := make(map[limitKey]*outcomeSet, len(t.sets)+1)
	for k, v := range t.sets {
		sets[k] = v
	}
	sets[key] = set
	ls.table.Store(&limitTable{labels: t.labels, figures: t.figures, sets: sets})
	return set
}
