package otellimit

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/internal/eventmetrics"
)

// scopeName is the instrumentation scope (the Meter's name) of the
// instruments New creates.
const scopeName = "github.com/sluicehq/sluice/otellimit"

// defaultNamespace prefixes every name unless WithNamespace gives another.
const defaultNamespace = "sluice"

// Recorder records Limiter decisions on OpenTelemetry instruments (see the
// package documentation for them). Create it with New and pass its Observe
// method to core.WithObserver; one Recorder serves any number of Limiters,
// told apart by name.
//
// There is no useful zero value. A Recorder is safe for concurrent use:
// Observe is called on the request goroutines of every Limiter it observes.
type Recorder struct {
	decisions   metric.Int64Counter
	latency     metric.Float64Histogram
	storeErrors metric.Int64Counter
	nearLimit   metric.Int64Counter  // core.Event.NearLimit
	attrs       []attribute.KeyValue // WithAttributes'

	// limiters caches each limiter's latency and store error options, and
	// series the options of each decisions series. Both are copied on
	// write (under mu), so the read path takes no lock.
	limiters atomic.Pointer[map[string]*limiterState]
	series   atomic.Pointer[map[seriesKey][]metric.AddOption]
	mu       sync.Mutex
	labels   eventmetrics.LimitLabels
}

// limiterState holds one limiter's latency and store error options.
type limiterState struct {
	latency []metric.RecordOption
	errs    [len(eventmetrics.Kinds)][]metric.AddOption
}

// seriesKey names one series of the decisions counter; outcome is
// eventmetrics.Outcome's index.
type seriesKey struct {
	limiter, plan string
	limit         store.Limit // the zero Limit when no store decided
	outcome       int
}

// Option configures New.
type Option interface {
	apply(*config) error
}

type optionFunc func(*config) error

func (f optionFunc) apply(c *config) error { return f(c) }

type config struct {
	namespace string
	buckets   []float64
	attrs     []attribute.KeyValue
	stats     func() store.Stats
}

// WithStoreStats records the health of a store, read from stats at each
// collection (pass a Redis store's Stats method), on observable
// instruments:
//
//	sluice.store.instances            gauge, unit {instance}: the processes sharing Redis (0: unknown)
//	sluice.store.breaker_open {server} gauge, unit 1: 1 while the server's circuit breaker is open
//	sluice.store.debts                gauge, unit {key}: keys the fallback admitted but Redis is not yet charged for
//	sluice.store.oldest_debt          gauge, unit s: how long the oldest of them has waited
//	sluice.store.warnings {kind}      counter, unit {warning}: warnings the store logged, by kind
//
// The share of decisions made locally is the decisions counter's
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

// WithNamespace sets the prefix of every instrument name, joined with a
// dot ("sluice" by default); "" leaves the names unprefixed. It must start with an ASCII letter and hold only ASCII
// letters, digits, '_', '.', '-' and '/', at most 200 of them.
func WithNamespace(ns string) Option {
	return optionFunc(func(c *config) error {
		if ns != "" && !validNamespace(ns) {
			return fmt.Errorf("%w: namespace %q is not a valid instrument name", core.ErrInvalidOption, ns)
		}
		c.namespace = ns
		return nil
	})
}

// validNamespace reports whether ns is an instrument name short enough to
// take the longest suffix: [A-Za-z][A-Za-z0-9_./-]{0,199}.
func validNamespace(ns string) bool {
	if len(ns) > 200 {
		return false
	}
	for i := 0; i < len(ns); i++ {
		c := ns[i]
		letter := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
		other := c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-' || c == '/'
		if !letter && (i == 0 || !other) {
			return false
		}
	}
	return true
}

// WithLatencyBuckets sets the explicit bucket boundaries, in seconds, of
// the store latency histogram (by default promlimit's, 50µs to 1s: see the
// package doc). They must be finite and strictly increasing.
func WithLatencyBuckets(buckets ...float64) Option {
	return optionFunc(func(c *config) error {
		if err := eventmetrics.CheckBuckets(buckets, true); err != nil {
			return fmt.Errorf("%w: %v", core.ErrInvalidOption, err)
		}
		c.buckets = append([]float64(nil), buckets...)
		return nil
	})
}

// WithAttributes adds attributes with fixed values to every measurement,
// like promlimit's constant labels. Keys must be non-empty and other than
// the Recorder's own (limiter, plan, limit, outcome, kind, server); string values
// must be valid UTF-8. A later attribute with the same key replaces an
// earlier one. Attributes of the service as a whole usually belong on the
// MeterProvider's resource instead.
func WithAttributes(attrs ...attribute.KeyValue) Option {
	return optionFunc(func(c *config) error {
		for _, kv := range attrs {
			switch {
			case !kv.Valid():
				return fmt.Errorf("%w: attribute %q is not valid", core.ErrInvalidOption, kv.Key)
			case eventmetrics.Reserved(string(kv.Key)):
				return fmt.Errorf("%w: attribute %q is reserved", core.ErrInvalidOption, kv.Key)
			case kv.Value.Type() == attribute.STRING && !utf8.ValidString(kv.Value.AsString()):
				return fmt.Errorf("%w: attribute %s: value %q is not valid UTF-8", core.ErrInvalidOption, kv.Key, kv.Value.AsString())
			}
		}
		c.attrs = append(c.attrs, attrs...)
		return nil
	})
}

// New returns a Recorder whose instruments come from mp's Meter named
// "github.com/sluicehq/sluice/otellimit". It fails for a nil mp, a bad option, and when mp refuses an
// instrument.
func New(mp metric.MeterProvider, opts ...Option) (*Recorder, error) {
	if mp == nil {
		return nil, errors.New("otellimit: nil MeterProvider")
	}
	cfg := config{namespace: defaultNamespace, buckets: eventmetrics.DefaultLatencyBuckets()}
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt.apply(&cfg); err != nil {
			return nil, err
		}
	}
	r := &Recorder{attrs: cfg.attrs}
	if err := r.instruments(mp.Meter(scopeName), cfg); err != nil {
		return nil, err
	}
	r.limiters.Store(&map[string]*limiterState{})
	r.series.Store(&map[seriesKey][]metric.AddOption{})
	return r, nil
}

// instruments creates r's instruments on m.
func (r *Recorder) instruments(m metric.Meter, cfg config) error {
	name := func(s string) string {
		if cfg.namespace == "" {
			return s
		}
		return cfg.namespace + "." + s
	}
	var err1, err2, err3, err4 error
	r.decisions, err1 = m.Int64Counter(name("decisions"),
		metric.WithDescription(eventmetrics.HelpDecisions),
		metric.WithUnit("{decision}"))
	r.latency, err2 = m.Float64Histogram(name("store.latency"),
		metric.WithDescription(eventmetrics.HelpStoreLatency),
		metric.WithUnit("s"), metric.WithExplicitBucketBoundaries(cfg.buckets...))
	r.storeErrors, err3 = m.Int64Counter(name("store.errors"),
		metric.WithDescription(eventmetrics.HelpStoreErrors),
		metric.WithUnit("{error}"))
	r.nearLimit, err4 = m.Int64Counter(name("near_limit"),
		metric.WithDescription(eventmetrics.HelpNearLimit),
		metric.WithUnit("{decision}"))
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		return fmt.Errorf("otellimit: creating the instruments: %w", err)
	}
	if cfg.stats == nil {
		return nil
	}
	obs := make([]metric.Observable, len(eventmetrics.Stats))
	for i, st := range eventmetrics.Stats {
		var err error
		if st.Counter {
			obs[i], err = m.Float64ObservableCounter(name(st.OTel), metric.WithDescription(st.Help), metric.WithUnit(st.Unit))
		} else {
			obs[i], err = m.Float64ObservableGauge(name(st.OTel), metric.WithDescription(st.Help), metric.WithUnit(st.Unit))
		}
		if err != nil {
			return fmt.Errorf("otellimit: creating the instruments: %w", err)
		}
	}
	_, err := m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		stats := cfg.stats()
		for i, st := range eventmetrics.Stats {
			for label, v := range st.Read(stats) {
				opt := r.with()
				if st.Label != "" {
					opt = r.with(attribute.String(st.Label, label))
				}
				o.ObserveFloat64(obs[i].(metric.Float64Observable), v, opt)
			}
		}
		return nil
	}, obs...)
	if err != nil {
		return fmt.Errorf("otellimit: registering the store stats callback: %w", err)
	}
	return nil
}

// Observe records one decision. Pass it to core.WithObserver. It records
// with the context of the Event's request (context.Background without
// one), so that an SDK can attach exemplars of its trace. It is safe for
// concurrent use and, past the first decision of each series, looks its
// attributes up in a cache instead of building them.
func (r *Recorder) Observe(ev core.Event) {
	ctx := context.Background()
	if ev.Request != nil {
		ctx = ev.Request.Context()
	}
	ls := r.limiter(ctx, ev.Limiter)
	if ev.Latency > 0 {
		r.latency.Record(ctx, ev.Latency.Seconds(), ls.latency...)
	}
	if ev.Err != nil {
		if k, ok := eventmetrics.ErrorKind(ev.Err); ok {
			r.storeErrors.Add(ctx, 1, ls.errs[k]...)
		}
	}
	r.decisions.Add(ctx, 1, r.decision(ev)...)
	if ev.NearLimit != (store.Limit{}) {
		r.nearLimit.Add(ctx, 1, r.near(ev)...)
	}
}

// nearSeries is the seriesKey.outcome of a near_limit series.
const nearSeries = -2

// near returns the options of ev's near_limit series, cached.
func (r *Recorder) near(ev core.Event) []metric.AddOption {
	key := seriesKey{limiter: ev.Limiter, plan: ev.Plan, limit: ev.NearLimit, outcome: nearSeries}
	if opts, ok := (*r.series.Load())[key]; ok {
		return opts
	}
	opts := []metric.AddOption{r.with(
		attribute.String("limiter", eventmetrics.Value(ev.Limiter)),
		attribute.String("plan", eventmetrics.Value(ev.Plan)),
		attribute.String("limit", r.labels.Label(ev.NearLimit)),
	)}
	r.mu.Lock()
	eventmetrics.StoreWith(&r.series, key, opts)
	r.mu.Unlock()
	return opts
}

// limiter returns the cached options of the limiter named name, creating
// them on first use; then its store error series, one per kind, start at
// 0, as promlimit's do.
func (r *Recorder) limiter(ctx context.Context, name string) *limiterState {
	if ls := (*r.limiters.Load())[name]; ls != nil {
		return ls
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if ls := (*r.limiters.Load())[name]; ls != nil {
		return ls
	}
	limiter := attribute.String("limiter", eventmetrics.Value(name))
	ls := &limiterState{latency: []metric.RecordOption{r.with(limiter)}}
	for i, k := range eventmetrics.Kinds {
		ls.errs[i] = []metric.AddOption{r.with(limiter, attribute.String("kind", k))}
		r.storeErrors.Add(ctx, 0, ls.errs[i]...)
	}
	eventmetrics.StoreWith(&r.limiters, name, ls)
	return ls
}

// with returns the measurement option of the attribute set of kvs and r's
// constant attributes.
func (r *Recorder) with(kvs ...attribute.KeyValue) metric.MeasurementOption {
	all := make([]attribute.KeyValue, 0, len(r.attrs)+len(kvs))
	all = append(append(all, r.attrs...), kvs...)
	return metric.WithAttributeSet(attribute.NewSet(all...))
}

// decision returns the options of ev's decisions series, cached but for an
// outcome core does not define yet.
func (r *Recorder) decision(ev core.Event) []metric.AddOption {
	o, outcome := eventmetrics.Outcome(ev)
	key := seriesKey{limiter: ev.Limiter, plan: ev.Plan, limit: ev.Limit, outcome: o}
	if opts, ok := (*r.series.Load())[key]; ok {
		return opts
	}
	opts := []metric.AddOption{r.with(
		attribute.String("limiter", eventmetrics.Value(ev.Limiter)),
		attribute.String("plan", eventmetrics.Value(ev.Plan)),
		attribute.String("limit", r.labels.Label(ev.Limit)),
		attribute.String("outcome", outcome),
	)}
	if o >= 0 {
		r.mu.Lock()
		eventmetrics.StoreWith(&r.series, key, opts)
		r.mu.Unlock()
	}
	return opts
}
