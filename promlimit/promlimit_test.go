package promlimit_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"reflect"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/promlimit"
)

type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func newClock() *fakeClock { return &fakeClock{now: time.Unix(1_700_000_000, 0)} }

// byClient keys requests by their X-Client header.
func byClient(r *http.Request) (string, error) {
	if k := r.Header.Get("X-Client"); k != "" {
		return k, nil
	}
	return "", core.ErrNoKey
}

func request(client string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	if client != "" {
		r.Header.Set("X-Client", client)
	}
	return r
}

// flakyStore fails while fail is set, and otherwise passes Take to a
// memory store.
type flakyStore struct {
	fail  atomic.Bool
	calls atomic.Int64
	next  core.Store
}

var errDown = errors.New("store down")

func (s *flakyStore) Take(ctx context.Context, key string, n int64, limits ...core.Limit) (core.Result, error) {
	s.calls.Add(1)
	if s.fail.Load() {
		return core.Result{}, fmt.Errorf("flaky: %w", errDown)
	}
	return s.next.Take(ctx, key, n, limits...)
}

// hangingStore answers only when the context ends.
type hangingStore struct{}

func (hangingStore) Take(ctx context.Context, _ string, _ int64, _ ...core.Limit) (core.Result, error) {
	<-ctx.Done()
	return core.Result{}, ctx.Err()
}

// series returns the samples of the metric family name in g, by their
// labels rendered as `a="x",b="y"` (sorted by name); a histogram gives
// its sample count.
func series(t *testing.T, g prometheus.Gatherer, name string) map[string]float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			out[labelString(m.GetLabel())] = sampleValue(mf.GetType(), m)
		}
	}
	return out
}

func labelString(lps []*dto.LabelPair) string {
	parts := make([]string, len(lps))
	for i, lp := range lps {
		parts[i] = fmt.Sprintf("%s=%q", lp.GetName(), lp.GetValue())
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

func sampleValue(typ dto.MetricType, m *dto.Metric) float64 {
	switch typ {
	case dto.MetricType_COUNTER:
		return m.GetCounter().GetValue()
	case dto.MetricType_GAUGE:
		return m.GetGauge().GetValue()
	case dto.MetricType_HISTOGRAM:
		return float64(m.GetHistogram().GetSampleCount())
	}
	return math.NaN()
}

func wantSeries(t *testing.T, g prometheus.Gatherer, name string, want map[string]float64) {
	t.Helper()
	got := series(t, g, name)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s:\n got %v\nwant %v", name, got, want)
	}
}

func newCollector(t *testing.T, opts ...promlimit.Option) (*promlimit.Collector, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	c, err := promlimit.New(reg, opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return c, reg
}

func newLimiter(t *testing.T, store core.Store, limits []core.Limit, opts ...core.Option) *core.Limiter {
	t.Helper()
	l, err := core.New(store, byClient, limits, opts...)
	if err != nil {
		t.Fatalf("core.New: %v", err)
	}
	return l
}

func decide(l *core.Limiter, n int, client string) {
	for i := 0; i < n; i++ {
		l.Decide(request(client))
	}
}

func TestMemoryStoreDecisions(t *testing.T) {
	c, reg := newCollector(t)
	clock := newClock()
	store := core.NewMemoryStore(core.WithClock(clock.Now))
	l := newLimiter(t, store, []core.Limit{core.PerSecond(2)},
		core.WithName("api"), core.WithClock(clock.Now), core.WithObserver(c.Observe),
		core.OnKeyError(core.KeyErrorDeny))

	decide(l, 3, "alice") // 2 allowed, 1 denied
	decide(l, 1, "bob")   // allowed: another client
	decide(l, 2, "")      // no key: KeyErrorDeny

	wantSeries(t, reg, "sluice_decisions_total", map[string]float64{
		`limit="2",limiter="api",outcome="allowed"`:      3,
		`limit="2",limiter="api",outcome="denied"`:       1,
		`limit="none",limiter="api",outcome="key_error"`: 2,
	})
	// Only the four decisions that called the store are timed.
	wantSeries(t, reg, "sluice_store_latency_seconds", map[string]float64{`limiter="api"`: 4})
	wantSeries(t, reg, "sluice_store_errors_total", map[string]float64{
		`kind="breaker_open",limiter="api"`: 0,
		`kind="canceled",limiter="api"`:     0,
		`kind="error",limiter="api"`:        0,
		`kind="timeout",limiter="api"`:      0,
	})
	wantSeries(t, reg, "sluice_breaker_state", map[string]float64{`limiter="api"`: 0})
}

func TestTrackNamesLimits(t *testing.T) {
	c, reg := newCollector(t)
	clock := newClock()
	store := core.NewMemoryStore(core.WithClock(clock.Now))
	l := newLimiter(t, store, []core.Limit{core.PerSecond(10), {Rate: 2, Period: time.Hour}},
		core.WithName("api"), core.WithClock(clock.Now), core.WithObserver(c.Observe))
	if err := c.Track(l); err != nil {
		t.Fatal(err)
	}
	// The hourly limit binds: allowed while it has the least remaining,
	// then it denies.
	decide(l, 3, "alice")
	// The same limits, untracked, on another limiter: figures.
	l2 := newLimiter(t, store, []core.Limit{core.PerSecond(10), {Rate: 2, Period: time.Hour}},
		core.WithName("web"), core.WithClock(clock.Now), core.WithObserver(c.Observe))
	decide(l2, 3, "alice")

	wantSeries(t, reg, "sluice_decisions_total", map[string]float64{
		`limit="2/h gcra burst 2",limiter="api",outcome="allowed"`: 2,
		`limit="2/h gcra burst 2",limiter="api",outcome="denied"`:  1,
		`limit="2",limiter="web",outcome="allowed"`:                2,
		`limit="2",limiter="web",outcome="denied"`:                 1,
	})

	// After the Limiter's limits change, the old labels no longer match
	// the figures: the label falls back to the figure until Track again.
	if err := l.SetLimits([]core.Limit{{Rate: 5, Period: time.Hour, Algorithm: core.FixedWindow}}); err != nil {
		t.Fatal(err)
	}
	decide(l, 1, "carol")
	if err := c.Track(l); err != nil {
		t.Fatal(err)
	}
	decide(l, 1, "carol")
	got := series(t, reg, "sluice_decisions_total")
	if v := got[`limit="5",limiter="api",outcome="allowed"`]; v != 1 {
		t.Errorf("before Track: %v", got)
	}
	if v := got[`limit="5/h fixed_window",limiter="api",outcome="allowed"`]; v != 1 {
		t.Errorf("after Track: %v", got)
	}
}

func TestOutcomes(t *testing.T) {
	c, reg := newCollector(t)
	clock := newClock()
	mem := core.NewMemoryStore(core.WithClock(clock.Now))
	down := &flakyStore{next: mem}
	down.fail.Store(true)
	common := []core.Option{core.WithClock(clock.Now), core.WithObserver(c.Observe)}
	opts := func(name string, more ...core.Option) []core.Option {
		return append(append([]core.Option{core.WithName(name)}, common...), more...)
	}
	one := []core.Limit{{Rate: 1, Period: time.Second, Burst: 1}}

	decide(newLimiter(t, mem, one, opts("shadow", core.WithShadow())...), 2, "a")
	decide(newLimiter(t, mem, []core.Limit{{Algorithm: core.LeakyBucket, Rate: 1, Period: time.Second, Burst: 2}},
		opts("leaky")...), 2, "a")
	decide(newLimiter(t, down, one, opts("open", core.WithFailurePolicy(core.FailOpen))...), 2, "a")
	decide(newLimiter(t, down, one, opts("closed", core.WithFailurePolicy(core.FailClosed))...), 2, "a")
	decide(newLimiter(t, mem, one, opts("skip", core.WithSkip(func(*http.Request) bool { return true }))...), 2, "a")
	decide(newLimiter(t, mem, one, opts("keyallow", core.OnKeyError(core.KeyErrorAllow))...), 1, "")
	decide(newLimiter(t, hangingStore{}, one, opts("slow", core.WithTimeout(time.Millisecond),
		core.WithFailurePolicy(core.FailOpen))...), 1, "a")
	// A negative cost is reported in Event.Err but is no store error.
	decide(newLimiter(t, mem, one, opts("neg", core.WithCostFunc(func(*http.Request) int64 { return -1 }))...), 1, "a")

	wantSeries(t, reg, "sluice_decisions_total", map[string]float64{
		`limit="1",limiter="shadow",outcome="allowed"`:          1,
		`limit="1",limiter="shadow",outcome="shadow_denied"`:    1,
		`limit="3",limiter="leaky",outcome="allowed"`:           1,
		`limit="3",limiter="leaky",outcome="delayed"`:           1,
		`limit="none",limiter="open",outcome="failed_open"`:     2,
		`limit="none",limiter="closed",outcome="failed_closed"`: 2,
		`limit="none",limiter="skip",outcome="skipped"`:         2,
		`limit="none",limiter="keyallow",outcome="key_error"`:   1,
		`limit="none",limiter="slow",outcome="failed_open"`:     1,
		`limit="1",limiter="neg",outcome="allowed"`:             1,
	})
	errs := series(t, reg, "sluice_store_errors_total")
	var nonzero []string
	for k, v := range errs {
		if v != 0 {
			nonzero = append(nonzero, fmt.Sprintf("%s %v", k, v))
		}
	}
	sort.Strings(nonzero)
	want := []string{
		`kind="error",limiter="closed" 2`,
		`kind="error",limiter="open" 2`,
		`kind="timeout",limiter="slow" 1`,
	}
	if !reflect.DeepEqual(nonzero, want) {
		t.Errorf("store errors: %v, want %v", nonzero, want)
	}
	lat := series(t, reg, "sluice_store_latency_seconds")
	for name, calls := range map[string]float64{"shadow": 2, "leaky": 2, "open": 2, "closed": 2, "skip": 0, "keyallow": 0, "slow": 1, "neg": 1} {
		if got := lat[fmt.Sprintf("limiter=%q", name)]; got != calls {
			t.Errorf("latency samples of %s = %v, want %v", name, got, calls)
		}
	}
}

// Events from a caller other than a Limiter: a canceled context, and an
// outcome core does not define yet.
func TestObserveEvents(t *testing.T) {
	c, reg := newCollector(t, promlimit.WithNamespace("x"))
	c.Observe(core.Event{Limiter: "a", Outcome: core.OutcomeFailedOpen, Err: fmt.Errorf("take: %w", context.Canceled), Latency: time.Millisecond})
	c.Observe(core.Event{Limiter: "a", Outcome: core.Outcome(200)})
	c.Observe(core.Event{Limiter: "a", Outcome: core.Outcome(200)})
	c.Observe(core.Event{Limiter: "a", Outcome: core.OutcomeFallback,
		Result: core.Result{Allowed: true, Limit: 7, Binding: 1}})
	wantSeries(t, reg, "x_decisions_total", map[string]float64{
		`limit="none",limiter="a",outcome="failed_open"`:  1,
		`limit="none",limiter="a",outcome="outcome(200)"`: 2,
		`limit="7",limiter="a",outcome="fallback"`:        1,
	})
	if got := series(t, reg, "x_store_errors_total")[`kind="canceled",limiter="a"`]; got != 1 {
		t.Errorf("canceled = %v, want 1", got)
	}
	wantSeries(t, reg, "x_store_latency_seconds", map[string]float64{`limiter="a"`: 1})
}

func TestOptions(t *testing.T) {
	c, reg := newCollector(t,
		promlimit.WithNamespace(""),
		promlimit.WithLatencyBuckets(0.001, 0.01),
		promlimit.WithConstLabels(prometheus.Labels{"service": "shop"}),
		promlimit.WithLimits("api", core.Limit{Algorithm: core.TokenBucket, Rate: 5, Period: time.Minute}),
		nil, // ignored, like core's
	)
	c.Observe(core.Event{Limiter: "api", Outcome: core.OutcomeDenied, Latency: 5 * time.Millisecond,
		Result: core.Result{Limit: 5}})
	wantSeries(t, reg, "decisions_total", map[string]float64{
		`limit="5/m token_bucket burst 5",limiter="api",outcome="denied",service="shop"`: 1,
	})
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "store_latency_seconds" {
			continue
		}
		var bounds []float64
		var counts []uint64
		for _, b := range mf.GetMetric()[0].GetHistogram().GetBucket() {
			bounds = append(bounds, b.GetUpperBound())
			counts = append(counts, b.GetCumulativeCount())
		}
		if !reflect.DeepEqual(bounds, []float64{0.001, 0.01}) || !reflect.DeepEqual(counts, []uint64{0, 1}) {
			t.Errorf("buckets %v counts %v", bounds, counts)
		}
		return
	}
	t.Error("no store_latency_seconds")
}

func TestBadOptions(t *testing.T) {
	for name, opt := range map[string]promlimit.Option{
		"no buckets":         promlimit.WithLatencyBuckets(),
		"NaN bucket":         promlimit.WithLatencyBuckets(0.1, math.NaN()),
		"decreasing buckets": promlimit.WithLatencyBuckets(0.1, 0.01),
		"equal buckets":      promlimit.WithLatencyBuckets(0.1, 0.1),
		"reserved label":     promlimit.WithConstLabels(prometheus.Labels{"limiter": "x"}),
		"le label":           promlimit.WithConstLabels(prometheus.Labels{"le": "x"}),
		"bad limit":          promlimit.WithLimits("api", core.Limit{Rate: 0, Period: time.Second}),
		"namespace":          promlimit.WithNamespace("bad-ns"),
		"namespace digit":    promlimit.WithNamespace("1ns"),
		"label name":         promlimit.WithConstLabels(prometheus.Labels{"bad-name": "x"}),
		"label colon":        promlimit.WithConstLabels(prometheus.Labels{"a:b": "x"}),
		"label __":           promlimit.WithConstLabels(prometheus.Labels{"__x": "x"}),
		"label empty":        promlimit.WithConstLabels(prometheus.Labels{"": "x"}),
		"label value":        promlimit.WithConstLabels(prometheus.Labels{"ok": "\xff"}),
	} {
		reg := prometheus.NewRegistry()
		c, err := promlimit.New(reg, opt)
		if !errors.Is(err, promlimit.ErrInvalidOption) || c != nil {
			t.Errorf("%s: %v, %v; want ErrInvalidOption", name, c, err)
		}
		if mfs, _ := reg.Gather(); len(mfs) != 0 {
			t.Errorf("%s: registered anyway", name)
		}
	}
	for _, ns := range []string{"a", "_a:b_9", "A"} {
		if _, err := promlimit.New(prometheus.NewRegistry(), promlimit.WithNamespace(ns)); err != nil {
			t.Errorf("namespace %q: %v", ns, err)
		}
	}

	c, _ := newCollector(t)
	if err := c.Track(nil); !errors.Is(err, promlimit.ErrInvalidOption) {
		t.Errorf("Track(nil): %v", err)
	}
	if err := c.SetLimits("api", core.PerSecond(1), core.Limit{Rate: 1}); !errors.Is(err, promlimit.ErrInvalidOption) ||
		!errors.Is(err, core.ErrInvalidLimit) {
		t.Errorf("SetLimits(bad): %v", err)
	}
}

func TestDoubleRegistration(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := promlimit.New(reg); err != nil {
		t.Fatal(err)
	}
	c, err := promlimit.New(reg)
	var are prometheus.AlreadyRegisteredError
	if !errors.As(err, &are) || c != nil {
		t.Fatalf("second New: %v, %v; want an AlreadyRegisteredError", c, err)
	}
	// Another namespace, or other constant label values, can coexist.
	if _, err := promlimit.New(reg, promlimit.WithNamespace("other")); err != nil {
		t.Errorf("other namespace: %v", err)
	}
	if _, err := promlimit.New(reg, promlimit.WithNamespace("other"),
		promlimit.WithConstLabels(prometheus.Labels{"shard": "2"})); err == nil {
		// Same names with a different label set are inconsistent.
		t.Errorf("same namespace, extra constant label: no error")
	}
}

func TestDefaultRegisterer(t *testing.T) {
	c, err := promlimit.New(nil, promlimit.WithNamespace("promlimit_default_test"))
	if err != nil {
		t.Fatal(err)
	}
	defer prometheus.DefaultRegisterer.Unregister(c)
	c.Observe(core.Event{Limiter: "api", Outcome: core.OutcomeAllowed, Result: core.Result{Allowed: true, Limit: 4}})
	if got := series(t, prometheus.DefaultGatherer, "promlimit_default_test_decisions_total"); got[`limit="4",limiter="api",outcome="allowed"`] != 1 {
		t.Errorf("default gatherer: %v", got)
	}
	if _, err := promlimit.New(nil, promlimit.WithNamespace("promlimit_default_test")); err == nil {
		t.Error("second registration with the default registerer: no error")
	}
	if !prometheus.DefaultRegisterer.Unregister(c) {
		t.Error("not registered with the default registerer")
	}
}

// Concurrent decisions on several limiters while their labels change: no
// count is lost (run with -race).
func TestConcurrentObserve(t *testing.T) {
	c, reg := newCollector(t)
	const goroutines, each = 8, 500
	var wg sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			name := fmt.Sprintf("l%d", g%3)
			for i := 0; i < each; i++ {
				c.Observe(core.Event{Limiter: name, Outcome: core.Outcome(i % 3),
					Result: core.Result{Limit: 10, Binding: 0}, Latency: time.Microsecond})
				if i%100 == 0 {
					if err := c.SetLimits(name, core.PerSecond(10)); err != nil {
						t.Error(err)
					}
				}
			}
		}(g)
	}
	wg.Wait()
	var total, samples float64
	for _, v := range series(t, reg, "sluice_decisions_total") {
		total += v
	}
	for _, v := range series(t, reg, "sluice_store_latency_seconds") {
		samples += v
	}
	if total != goroutines*each || samples != goroutines*each {
		t.Errorf("decisions %v, latency samples %v; want %d", total, samples, goroutines*each)
	}
}

func TestObserveDoesNotAllocate(t *testing.T) {
	c, _ := newCollector(t)
	evs := benchEvents()
	for _, ev := range evs {
		c.Observe(ev) // first sight creates the children
	}
	allocs := testing.AllocsPerRun(100, func() {
		for _, ev := range evs {
			c.Observe(ev)
		}
	})
	if allocs != 0 {
		t.Errorf("Observe allocates: %v per %d events", allocs, len(evs))
	}
	if got := testutil.CollectAndCount(c, "sluice_decisions_total"); got != 3 {
		t.Errorf("%d decision series, want 3", got)
	}
}

func benchEvents() []core.Event {
	res := core.Result{Allowed: true, Limit: 100, Remaining: 50}
	return []core.Event{
		{Limiter: "api", Outcome: core.OutcomeAllowed, Result: res, Latency: 40 * time.Microsecond},
		{Limiter: "api", Outcome: core.OutcomeDenied, Result: core.Result{Limit: 100}, Latency: 40 * time.Microsecond},
		{Limiter: "api", Outcome: core.OutcomeFallback, Result: res, Latency: 3 * time.Millisecond,
			Err: fmt.Errorf("take: %w", context.DeadlineExceeded)},
	}
}

func BenchmarkObserve(b *testing.B) {
	reg := prometheus.NewRegistry()
	c, err := promlimit.New(reg)
	if err != nil {
		b.Fatal(err)
	}
	ev := benchEvents()[0]
	b.Run("allowed", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			c.Observe(ev)
		}
	})
	b.Run("allowed-parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				c.Observe(ev)
			}
		})
	})
	// A decision that called no store: the counter and the gauge only.
	skipped := core.Event{Limiter: "api", Outcome: core.OutcomeSkipped}
	b.Run("skipped", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			c.Observe(skipped)
		}
	})
	failed := benchEvents()[2]
	b.Run("fallback-timeout", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			c.Observe(failed)
		}
	})
	// For comparison: the same counter through CounterVec.WithLabelValues.
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cmp_total", Help: "x"}, []string{"limiter", "limit", "outcome"})
	b.Run("WithLabelValues", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			vec.WithLabelValues(ev.Limiter, "100", ev.Outcome.String()).Inc()
		}
	})
}
