package promlimit

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/internal/eventmetrics"
)

// defaultNamespace prefixes every name unless WithNamespace gives another.
const defaultNamespace = "sluice"

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
	stats       func() store.Stats     // WithStoreStats; nil: none
	statDescs   []*prometheus.Desc     // of eventmetrics.Stats, when stats is set
	nearLimit   *prometheus.CounterVec // core.Event.NearLimit

	// limiters maps a limiter name to its cached metric children, copied
	// on write (under mu), so the read path takes no lock.
	limiters atomic.Pointer[map[string]*limiterState]
	mu       sync.Mutex
	labels   eventmetrics.LimitLabels
}

// limiterState caches one limiter's metric children.
type limiterState struct {
	name    string
	latency prometheus.Observer
	errs    [len(eventmetrics.Kinds)]prometheus.Counter

	sets atomic.Pointer[map[setKey]*outcomeSet] // copied on write, under mu
	mu   sync.Mutex
}

// setKey names the decisions_total children of one limiter that share a
// plan and a binding limit.
type setKey struct {
	plan  string
	limit store.Limit // the zero Limit when no store decided
}

// outcomeSet holds the decisions_total children of one limiter, plan and
// limit, one per outcome label (eventmetrics.Outcome's index), created on
// first use; an outcome core does not define yet still counts, through the
// slower path.
type outcomeSet struct {
	plan, limit string // label values
	counters    [eventmetrics.NumOutcomes]atomic.Pointer[counterBox]
	near        atomic.Pointer[counterBox] // near_limit_total, when the set's limit is near
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
	stats       func() store.Stats
}

// WithStoreStats exports the health of a store, read from stats at each
// scrape (pass a Redis store's Stats method):
//
//	sluice_store_instances                  gauge: the processes sharing Redis (0: unknown)
//	sluice_store_breaker_open{server}       gauge: 1 while the server's circuit breaker is open
//	sluice_store_debts                      gauge: keys the fallback admitted but Redis is not yet charged for
//	sluice_store_oldest_debt_seconds        gauge: how long the oldest of them has waited
//	sluice_store_warnings_total{kind}       counter: warnings the store logged, by kind
//
// The share of decisions made locally is decisions_total's
// fallback_allowed and fallback_denied outcomes.
func WithStoreStats(stats func() store.Stats) Option {
	return optionFunc(func(c *config) error {
		if stats == nil {
			return fmt.Errorf("%w: WithStoreStats: a nil function", core.ErrInvalidOption)
		}
		c.stats = stats
		return nil
	})
}

// WithNamespace sets the prefix of every metric name ("sluice" by
// default); "" leaves the names unprefixed. It must be a
// classic Prometheus metric name: ASCII letters, digits, '_' and ':', not
// starting with a digit.
func WithNamespace(ns string) Option {
	return optionFunc(func(c *config) error {
		if ns != "" && !validName(ns, true) {
			return fmt.Errorf("%w: namespace %q is not a valid metric name", core.ErrInvalidOption, ns)
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
// histogram's buckets (by default 50µs to 1s, as the package doc lists
// them). They must be strictly increasing; the +Inf bucket is implicit.
func WithLatencyBuckets(buckets ...float64) Option {
	return optionFunc(func(c *config) error {
		if err := eventmetrics.CheckBuckets(buckets, false); err != nil {
			return fmt.Errorf("%w: %v", core.ErrInvalidOption, err)
		}
		c.buckets = append([]float64(nil), buckets...)
		return nil
	})
}

// WithConstLabels adds labels with fixed values to every metric, for
// instance the service or the instance's zone. Their names must be classic
// Prometheus label names ([a-zA-Z_][a-zA-Z0-9_]*, not starting with "__")
// other than the Collector's own labels (limiter, plan, limit, outcome,
// kind, server) and le; values must be valid UTF-8.
func WithConstLabels(labels prometheus.Labels) Option {
	return optionFunc(func(c *config) error {
		for name, v := range labels {
			switch {
			case !validName(name, false) || strings.HasPrefix(name, "__"):
				return fmt.Errorf("%w: constant label name %q is not a valid label name", core.ErrInvalidOption, name)
			case eventmetrics.Reserved(name) || name == "le":
				return fmt.Errorf("%w: constant label %q is reserved", core.ErrInvalidOption, name)
			case !utf8.ValidString(v):
				return fmt.Errorf("%w: constant label %s: value %q is not valid UTF-8", core.ErrInvalidOption, name, v)
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
	cfg := config{namespace: defaultNamespace, buckets: eventmetrics.DefaultLatencyBuckets()}
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
			Help:        eventmetrics.HelpDecisions,
			ConstLabels: cfg.constLabels,
		}, []string{"limiter", "plan", "limit", "outcome"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace:   cfg.namespace,
			Name:        "store_latency_seconds",
			Help:        eventmetrics.HelpStoreLatency,
			ConstLabels: cfg.constLabels,
			Buckets:     cfg.buckets,
		}, []string{"limiter"}),
		storeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace:   cfg.namespace,
			Name:        "store_errors_total",
			Help:        eventmetrics.HelpStoreErrors,
			ConstLabels: cfg.constLabels,
		}, []string{"limiter", "kind"}),
		nearLimit: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace:   cfg.namespace,
			Name:        "near_limit_total",
			Help:        eventmetrics.HelpNearLimit,
			ConstLabels: cfg.constLabels,
		}, []string{"limiter", "plan", "limit"}),
		stats: cfg.stats,
	}
	if c.stats != nil {
		for _, st := range eventmetrics.Stats {
			var labels []string
			if st.Label != "" {
				labels = []string{st.Label}
			}
			c.statDescs = append(c.statDescs, prometheus.NewDesc(
				prometheus.BuildFQName(cfg.namespace, "", st.Prom), st.Help, labels, cfg.constLabels))
		}
	}
	c.limiters.Store(&map[string]*limiterState{})
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
	c.nearLimit.Describe(ch)
	for _, d := range c.statDescs {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	c.decisions.Collect(ch)
	c.latency.Collect(ch)
	c.storeErrors.Collect(ch)
	c.nearLimit.Collect(ch)
	if c.stats == nil {
		return
	}
	stats := c.stats()
	for i, st := range eventmetrics.Stats {
		typ := prometheus.GaugeValue
		if st.Counter {
			typ = prometheus.CounterValue
		}
		for label, v := range st.Read(stats) {
			var values []string
			if st.Label != "" {
				values = []string{label}
			}
			ch <- prometheus.MustNewConstMetric(c.statDescs[i], typ, v, values...)
		}
	}
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
		if k, ok := eventmetrics.ErrorKind(ev.Err); ok {
			ls.errs[k].Inc()
		}
	}
	c.decision(ls, ev).Inc()
	if ev.NearLimit != (store.Limit{}) {
		c.near(ls, ev).Inc()
	}
}

// near returns the near_limit_total child of ls for ev's plan and near
// limit.
func (c *Collector) near(ls *limiterState, ev core.Event) prometheus.Counter {
	key := setKey{plan: ev.Plan, limit: ev.NearLimit}
	set := (*ls.sets.Load())[key]
	if set == nil {
		set = ls.addSet(key, c.labels.Label(ev.NearLimit))
	}
	if b := set.near.Load(); b != nil {
		return b.Counter
	}
	b := &counterBox{c.nearLimit.WithLabelValues(ls.name, set.plan, set.limit)}
	set.near.Store(b) // concurrent first uses may both store the same child
	return b.Counter
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
	label := eventmetrics.Value(name)
	ls := &limiterState{name: label, latency: c.latency.WithLabelValues(label)}
	for i, k := range eventmetrics.Kinds {
		ls.errs[i] = c.storeErrors.WithLabelValues(label, k)
	}
	ls.sets.Store(&map[setKey]*outcomeSet{})
	eventmetrics.StoreWith(&c.limiters, name, ls)
	return ls
}

// decision returns the decisions_total child of ls for ev's plan, limit
// and outcome label.
func (c *Collector) decision(ls *limiterState, ev core.Event) prometheus.Counter {
	key := setKey{plan: ev.Plan, limit: ev.Limit}
	set := (*ls.sets.Load())[key]
	if set == nil {
		set = ls.addSet(key, c.labels.Label(ev.Limit))
	}
	o, outcome := eventmetrics.Outcome(ev)
	if o < 0 {
		return c.decisions.WithLabelValues(ls.name, set.plan, set.limit, outcome)
	}
	if b := set.counters[o].Load(); b != nil {
		return b.Counter
	}
	b := &counterBox{c.decisions.WithLabelValues(ls.name, set.plan, set.limit, outcome)}
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
	set := &outcomeSet{plan: eventmetrics.Value(key.plan), limit: limit}
	eventmetrics.StoreWith(&ls.sets, key, set)
	return set
}
