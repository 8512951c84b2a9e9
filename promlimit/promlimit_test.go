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
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/core/storetest"
	"github.com/sluicehq/sluice/internal/fallback"
	"github.com/sluicehq/sluice/internal/partial"
	"github.com/sluicehq/sluice/promlimit"
)

// fakeClock is the one fake clock, storetest.Clock.
type fakeClock = storetest.Clock

func newClock() *fakeClock { return storetest.NewClock(time.Unix(1_700_000_000, 0)) }

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
	partial.Store
	fail  atomic.Bool
	calls atomic.Int64
	next  store.Store
}

var errDown = errors.New("store down")

func (s *flakyStore) Take(ctx context.Context, key string, n int64, limits ...store.Spec) (store.Result, error) {
	s.calls.Add(1)
	if s.fail.Load() {
		return store.Result{}, fmt.Errorf("flaky: %w", errDown)
	}
	return s.next.Take(ctx, key, n, limits...)
}

// Charge is Take (no stamps needed here).
func (s *flakyStore) Charge(ctx context.Context, key string, n int64, limits ...store.Spec) (store.Result, error) {
	return s.Take(ctx, key, n, limits...)
}

// hangingStore answers only when the context ends.
type hangingStore struct{ partial.Store }

func (hangingStore) Take(ctx context.Context, _ string, _ int64, _ ...store.Spec) (store.Result, error) {
	<-ctx.Done()
	return store.Result{}, ctx.Err()
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

func newLimiter(t *testing.T, st store.Store, name string, limits []store.Limit, opts ...core.Option) *core.Limiter {
	t.Helper()
	l, err := core.New(st, name, byClient, limits, opts...)
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
	st := memorystore.New(memorystore.WithClock(clock.Now))
	l := newLimiter(t, st, "api", []store.Limit{store.PerSecond(2)}, core.WithClock(clock.Now), core.WithObserver(c.Observe),
		core.WithKeyErrorRule(core.KeyErrorDeny, nil))

	decide(l, 3, "alice") // 2 allowed, 1 denied
	decide(l, 1, "bob")   // allowed: another client
	decide(l, 2, "")      // no key: KeyErrorDeny

	wantSeries(t, reg, "sluice_decisions_total", map[string]float64{
		`limit="2/s gcra burst 2",limiter="api",outcome="allowed",plan=""`: 3,
		`limit="2/s gcra burst 2",limiter="api",outcome="denied",plan=""`:  1,
		`limit="none",limiter="api",outcome="key_error",plan=""`:           2,
	})
	// Only the four decisions that called the store are timed.
	wantSeries(t, reg, "sluice_store_latency_seconds", map[string]float64{`limiter="api"`: 4})
	wantSeries(t, reg, "sluice_store_errors_total", map[string]float64{
		`kind="breaker_open",limiter="api"`: 0,
		`kind="canceled",limiter="api"`:     0,
		`kind="error",limiter="api"`:        0,
		`kind="oom",limiter="api"`:          0,
		`kind="timeout",limiter="api"`:      0,
	})
	// The breaker belongs to the store now: no gauge of it here.
	wantSeries(t, reg, "sluice_breaker_state", map[string]float64{})
}

// The limit label is the Event's binding limit, defaults spelt out, with no
// help from the caller: equal limits get equal labels however written, and
// a change of limits shows at the next decision.
func TestLimitLabel(t *testing.T) {
	c, reg := newCollector(t)
	clock := newClock()
	st := memorystore.New(memorystore.WithClock(clock.Now))
	opts := func(name string) []core.Option {
		return []core.Option{core.WithClock(clock.Now), core.WithObserver(c.Observe)}
	}
	// The hourly limit binds: allowed while it has the least remaining,
	// then it denies.
	l := newLimiter(t, st, "api", []store.Limit{store.PerSecond(10), {Rate: 2, Period: time.Hour}}, opts("api")...)
	decide(l, 3, "alice")
	// The same limit written with its defaults, on another limiter.
	l2 := newLimiter(t, st, "web", []store.Limit{{Algorithm: store.GCRA, Rate: 2, Period: time.Hour, Burst: 2}}, opts("web")...)
	decide(l2, 1, "alice")

	if err := l.SetLimits([]store.Limit{{Rate: 5, Period: time.Hour, Algorithm: store.FixedWindow, Penalty: time.Minute}}); err != nil {
		t.Fatal(err)
	}
	decide(l, 1, "carol")

	wantSeries(t, reg, "sluice_decisions_total", map[string]float64{
		`limit="2/h gcra burst 2",limiter="api",outcome="allowed",plan=""`:            2,
		`limit="2/h gcra burst 2",limiter="api",outcome="denied",plan=""`:             1,
		`limit="2/h gcra burst 2",limiter="web",outcome="allowed",plan=""`:            1,
		`limit="5/h fixed_window penalty 1m",limiter="api",outcome="allowed",plan=""`: 1,
	})
}

// The plan label is Event.Plan: the request's plan's limits decided, or ""
// (PlanNone) for the Limiter's own.
func TestPlanLabel(t *testing.T) {
	c, reg := newCollector(t)
	clock := newClock()
	st := memorystore.New(memorystore.WithClock(clock.Now))
	planOf := func(r *http.Request) string { return r.Header.Get("X-Plan") }
	plans := map[string][]store.Limit{"free": {store.PerMinute(1)}, "pro": {store.PerMinute(100)}}
	l := newLimiter(t, st, "api", []store.Limit{store.PerMinute(1)}, core.WithClock(clock.Now),
		core.WithObserver(c.Observe), core.WithPlans(planOf, plans))
	for _, rq := range []struct{ client, plan string }{
		{"a", "free"}, {"a", "free"}, {"b", "pro"}, {"c", ""}, {"d", "unknown"},
	} {
		r := request(rq.client)
		r.Header.Set("X-Plan", rq.plan)
		l.Decide(r)
	}
	wantSeries(t, reg, "sluice_decisions_total", map[string]float64{
		`limit="1/m gcra burst 1",limiter="api",outcome="allowed",plan="free"`:    1,
		`limit="1/m gcra burst 1",limiter="api",outcome="denied",plan="free"`:     1,
		`limit="100/m gcra burst 100",limiter="api",outcome="allowed",plan="pro"`: 1,
		`limit="1/m gcra burst 1",limiter="api",outcome="allowed",plan=""`:        2,
	})
}

// Fallback decisions are split by what the local store decided.
func TestFallbackAllowedAndDenied(t *testing.T) {
	c, reg := newCollector(t)
	clock := newClock()
	st := &flakyStore{next: memorystore.New(memorystore.WithClock(clock.Now))}
	local := memorystore.New(memorystore.WithClock(clock.Now))
	newL := func(name string, more ...core.Option) *core.Limiter {
		return newLimiter(t, fallback.New(st, fallback.Config{Local: local}), name, []store.Limit{store.PerSecond(3)}, append([]core.Option{
			core.WithClock(clock.Now), core.WithObserver(c.Observe)}, more...)...)
	}
	l := newL("api")
	shadow := newL("shadow", core.WithShadow())

	st.fail.Store(true)
	decide(l, 4, "alice")    // the local store allows 3 and denies the 4th
	decide(shadow, 4, "bob") // the same, served anyway
	st.fail.Store(false)
	decide(l, 1, "carol") // the store is back

	wantSeries(t, reg, "sluice_decisions_total", map[string]float64{
		`limit="3/s gcra burst 3",limiter="api",outcome="fallback_allowed",plan=""`:    3,
		`limit="3/s gcra burst 3",limiter="api",outcome="fallback_denied",plan=""`:     1,
		`limit="3/s gcra burst 3",limiter="api",outcome="allowed",plan=""`:             1,
		`limit="3/s gcra burst 3",limiter="shadow",outcome="fallback_allowed",plan=""`: 3,
		`limit="3/s gcra burst 3",limiter="shadow",outcome="fallback_denied",plan=""`:  1,
	})
	errs := series(t, reg, "sluice_store_errors_total")
	if errs[`kind="error",limiter="api"`] != 4 || errs[`kind="error",limiter="shadow"`] != 4 {
		t.Errorf("store errors: %v", errs)
	}
	// The local store was timed every time, the store once more.
	wantSeries(t, reg, "sluice_store_latency_seconds", map[string]float64{`limiter="api"`: 5, `limiter="shadow"`: 4})
}

func TestOutcomes(t *testing.T) {
	c, reg := newCollector(t)
	clock := newClock()
	mem := memorystore.New(memorystore.WithClock(clock.Now))
	down := &flakyStore{next: mem}
	down.fail.Store(true)
	common := []core.Option{core.WithClock(clock.Now), core.WithObserver(c.Observe)}
	opts := func(name string, more ...core.Option) []core.Option {
		return append(append([]core.Option{}, common...), more...)
	}
	one := []store.Limit{{Rate: 1, Period: time.Second, Burst: 1}}

	decide(newLimiter(t, mem, "shadow", one, opts("shadow", core.WithShadow())...), 2, "a")
	decide(newLimiter(t, mem, "leaky", []store.Limit{{Algorithm: store.LeakyBucket, Rate: 1, Period: time.Second, Burst: 2}}, opts("leaky")...), 2, "a")
	decide(newLimiter(t, down, "open", one, opts("open", core.WithFailurePolicy(core.FailOpen))...), 2, "a")
	decide(newLimiter(t, down, "closed", one, opts("closed", core.WithFailurePolicy(core.FailClosed))...), 2, "a")
	decide(newLimiter(t, mem, "skip", one, opts("skip", core.WithSkip(func(*http.Request) bool { return true }))...), 2, "a")
	decide(newLimiter(t, mem, "keyallow", one, opts("keyallow", core.WithKeyErrorRule(core.KeyErrorAllow, nil))...), 1, "")
	decide(newLimiter(t, fallback.New(hangingStore{}, fallback.Config{Timeout: time.Millisecond}), "slow", one, opts("slow",
		core.WithFailurePolicy(core.FailOpen))...), 1, "a")
	// A negative cost is reported in Event.Err but is no store error.
	decide(newLimiter(t, mem, "neg", one, opts("neg", core.WithCost(func(*http.Request) int64 { return -1 }))...), 1, "a")

	const one1 = `limit="1/s gcra burst 1"`
	wantSeries(t, reg, "sluice_decisions_total", map[string]float64{
		one1 + `,limiter="shadow",outcome="allowed",plan=""`:                         1,
		one1 + `,limiter="shadow",outcome="shadow_denied",plan=""`:                   1,
		`limit="1/s leaky_bucket burst 2",limiter="leaky",outcome="allowed",plan=""`: 1,
		`limit="1/s leaky_bucket burst 2",limiter="leaky",outcome="delayed",plan=""`: 1,
		`limit="none",limiter="open",outcome="failed_open",plan=""`:                  2,
		`limit="none",limiter="closed",outcome="failed_closed",plan=""`:              2,
		`limit="none",limiter="skip",outcome="skipped",plan=""`:                      2,
		`limit="none",limiter="keyallow",outcome="key_error",plan=""`:                1,
		`limit="none",limiter="slow",outcome="failed_open",plan=""`:                  1,
		one1 + `,limiter="neg",outcome="allowed",plan=""`:                            1,
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

// Events from a caller other than a Limiter: a canceled context, an open
// breaker, an outcome core does not define yet, an invalid limit, and
// label values that are not UTF-8.
func TestObserveEvents(t *testing.T) {
	c, reg := newCollector(t, promlimit.WithNamespace("x"))
	lim := store.Limit{Algorithm: store.TokenBucket, Rate: 7, Period: time.Minute}
	c.Observe(core.Event{Limiter: "a", Outcome: core.OutcomeFailedOpen, Err: fmt.Errorf("take: %w", context.Canceled), Latency: time.Millisecond})
	c.Observe(core.Event{Limiter: "a", Outcome: core.Outcome(200)})
	c.Observe(core.Event{Limiter: "a", Outcome: core.Outcome(200)})
	c.Observe(core.Event{Limiter: "a", Plan: "p", Outcome: core.OutcomeFallback, Limit: lim,
		Err: fmt.Errorf("redis: %w", store.ErrBreakerOpen), Result: store.Result{Allowed: true, Limit: 7}})
	c.Observe(core.Event{Limiter: "a", Plan: "p", Outcome: core.OutcomeFallback, Limit: lim,
		Err: store.ErrBreakerOpen, Action: core.Refuse})
	c.Observe(core.Event{Limiter: "a", Outcome: core.OutcomeDenied, Limit: store.Limit{Rate: -1, Period: time.Second}})
	c.Observe(core.Event{Limiter: "\xff", Plan: "\xfe", Outcome: core.OutcomeAllowed})
	wantSeries(t, reg, "x_decisions_total", map[string]float64{
		`limit="none",limiter="a",outcome="failed_open",plan=""`:                                     1,
		`limit="none",limiter="a",outcome="outcome(200)",plan=""`:                                    2,
		`limit="7/m token_bucket burst 7",limiter="a",outcome="fallback_allowed",plan="p"`:           1,
		`limit="7/m token_bucket burst 7",limiter="a",outcome="fallback_denied",plan="p"`:            1,
		`limit="-1/s",limiter="a",outcome="denied",plan=""`:                                          1,
		fmt.Sprintf("limit=%q,limiter=%q,outcome=%q,plan=%q", "none", "\uFFFD", "allowed", "\uFFFD"): 1,
	})
	errs := series(t, reg, "x_store_errors_total")
	if errs[`kind="canceled",limiter="a"`] != 1 || errs[`kind="breaker_open",limiter="a"`] != 2 {
		t.Errorf("store errors: %v", errs)
	}
	if got := series(t, reg, "x_store_latency_seconds")[`limiter="a"`]; got != 1 {
		t.Errorf("latency samples = %v, want 1", got)
	}
}

func TestOptions(t *testing.T) {
	c, reg := newCollector(t,
		promlimit.WithNamespace(""),
		promlimit.WithLatencyBuckets(0.001, 0.01),
		promlimit.WithConstLabels(prometheus.Labels{"service": "shop"}),
		nil, // ignored, like core's
	)
	c.Observe(core.Event{Limiter: "api", Outcome: core.OutcomeDenied, Latency: 5 * time.Millisecond,
		Limit: store.Limit{Algorithm: store.TokenBucket, Rate: 5, Period: time.Minute}, Result: store.Result{Limit: 5}})
	wantSeries(t, reg, "decisions_total", map[string]float64{
		`limit="5/m token_bucket burst 5",limiter="api",outcome="denied",plan="",service="shop"`: 1,
	})
	bounds, counts := histogram(t, reg, "store_latency_seconds")
	if !reflect.DeepEqual(bounds, []float64{0.001, 0.01}) || !reflect.DeepEqual(counts, []uint64{0, 1}) {
		t.Errorf("buckets %v counts %v", bounds, counts)
	}
}

// histogram returns the bucket bounds and cumulative counts of the first
// series of the histogram name in g.
func histogram(t *testing.T, g prometheus.Gatherer, name string) ([]float64, []uint64) {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		var bounds []float64
		var counts []uint64
		for _, b := range mf.GetMetric()[0].GetHistogram().GetBucket() {
			bounds = append(bounds, b.GetUpperBound())
			counts = append(counts, b.GetCumulativeCount())
		}
		return bounds, counts
	}
	t.Fatalf("no %s", name)
	return nil, nil
}

// The default buckets: from 50µs to 1s.
func TestDefaultLatencyBuckets(t *testing.T) {
	want := []float64{0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1}
	c, reg := newCollector(t)
	c.Observe(core.Event{Limiter: "api", Latency: time.Millisecond})
	if bounds, _ := histogram(t, reg, "sluice_store_latency_seconds"); !reflect.DeepEqual(bounds, want) {
		t.Errorf("default buckets %v", bounds)
	}
}

func TestBadOptions(t *testing.T) {
	for name, opt := range map[string]promlimit.Option{
		"no buckets":         promlimit.WithLatencyBuckets(),
		"NaN bucket":         promlimit.WithLatencyBuckets(0.1, math.NaN()),
		"decreasing buckets": promlimit.WithLatencyBuckets(0.1, 0.01),
		"equal buckets":      promlimit.WithLatencyBuckets(0.1, 0.1),
		"reserved label":     promlimit.WithConstLabels(prometheus.Labels{"limiter": "x"}),
		"plan label":         promlimit.WithConstLabels(prometheus.Labels{"plan": "x"}),
		"le label":           promlimit.WithConstLabels(prometheus.Labels{"le": "x"}),
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
		if !errors.Is(err, core.ErrInvalidOption) || c != nil {
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
	c.Observe(core.Event{Limiter: "api", Outcome: core.OutcomeAllowed, Limit: store.PerSecond(4), Result: store.Result{Allowed: true, Limit: 4}})
	if got := series(t, prometheus.DefaultGatherer, "promlimit_default_test_decisions_total"); got[`limit="4/s gcra burst 4",limiter="api",outcome="allowed",plan=""`] != 1 {
		t.Errorf("default gatherer: %v", got)
	}
	if _, err := promlimit.New(nil, promlimit.WithNamespace("promlimit_default_test")); err == nil {
		t.Error("second registration with the default registerer: no error")
	}
	if !prometheus.DefaultRegisterer.Unregister(c) {
		t.Error("not registered with the default registerer")
	}
}

// Concurrent decisions on several limiters, plans and limits, each seen
// for the first time by several goroutines at once: no count is lost (run
// with -race).
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
				c.Observe(core.Event{Limiter: name, Plan: fmt.Sprint(i % 2), Outcome: core.Outcome(i % 3),
					Limit: store.PerSecond(int64(1 + i%5)), Latency: time.Microsecond})
			}
		}(g)
	}
	wg.Wait()
	var total, samples float64
	decisions := series(t, reg, "sluice_decisions_total")
	for _, v := range decisions {
		total += v
	}
	for _, v := range series(t, reg, "sluice_store_latency_seconds") {
		samples += v
	}
	if total != goroutines*each || samples != goroutines*each {
		t.Errorf("decisions %v, latency samples %v; want %d", total, samples, goroutines*each)
	}
	// 3 limiters × 2 plans × 5 limits × 3 outcomes, but plan, limit and
	// outcome go together: i%2, i%5 and i%3 take 30 combinations.
	if len(decisions) != 3*30 {
		t.Errorf("%d series, want 90", len(decisions))
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
	if got := testutil.CollectAndCount(c, "sluice_decisions_total"); got != len(evs) {
		t.Errorf("%d decision series, want %d", got, len(evs))
	}
}

// benchEvents are decisions of every kind of limiter, plan, limit and
// outcome label: a plan and a limit, the fallback split, no store.
func benchEvents() []core.Event {
	res := store.Result{Allowed: true, Limit: 100, Remaining: 50}
	lim := store.Limit{Rate: 100, Period: time.Minute, Penalty: time.Second}
	timeout := fmt.Errorf("take: %w", context.DeadlineExceeded)
	return []core.Event{
		{Limiter: "api", Plan: "pro", Limit: lim, Outcome: core.OutcomeAllowed, Result: res, Latency: 40 * time.Microsecond, NearLimit: lim},
		{Limiter: "api", Plan: "pro", Limit: lim, Outcome: core.OutcomeDenied, Result: store.Result{Limit: 100}, Latency: 40 * time.Microsecond},
		{Limiter: "api", Limit: lim, Outcome: core.OutcomeFallback, Result: res, Latency: 3 * time.Millisecond, Err: timeout},
		{Limiter: "api", Limit: lim, Outcome: core.OutcomeFallback, Result: store.Result{Limit: 100}, Latency: 3 * time.Millisecond,
			Err: fmt.Errorf("take: %w", store.ErrBreakerOpen)},
		{Limiter: "web", Outcome: core.OutcomeSkipped},
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
	// A decision that called no store: the counter only.
	skipped := benchEvents()[4]
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
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cmp_total", Help: "x"}, []string{"limiter", "plan", "limit", "outcome"})
	b.Run("WithLabelValues", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			vec.WithLabelValues(ev.Limiter, ev.Plan, "100/m gcra burst 100 penalty 1s", ev.Outcome.String()).Inc()
		}
	})
}

// A MaxInFlight limit's label names the in_flight algorithm (issue 21).
func TestInFlightLabel(t *testing.T) {
	c, reg := newCollector(t, promlimit.WithNamespace(""))
	c.Observe(core.Event{Limiter: "export", Outcome: core.OutcomeDenied,
		Limit: store.MaxInFlight(3, 10*time.Second), Result: store.Result{Limit: 3}})
	wantSeries(t, reg, "decisions_total", map[string]float64{
		`limit="3/10s in_flight",limiter="export",outcome="denied",plan=""`: 1,
	})
}

// near_limit_total counts the admitted decisions that left a limit less
// than a fifth of its capacity, labelled with that limit (not the binding
// one): 10/s burst 10 is near at 1 and 0 left, 20/h at 3 left or fewer.
func TestNearLimit(t *testing.T) {
	c, reg := newCollector(t)
	clock := newClock()
	st := memorystore.New(memorystore.WithClock(clock.Now))
	l := newLimiter(t, st, "api", []store.Limit{store.PerSecond(10), store.PerHour(20)}, core.WithClock(clock.Now), core.WithObserver(c.Observe))
	decide(l, 11, "alice") // 10 admitted (the last two near 10/s), 1 denied (not near: over)
	wantSeries(t, reg, "sluice_near_limit_total", map[string]float64{
		`limit="10/s gcra burst 10",limiter="api",plan=""`: 2,
	})
	clock.Advance(time.Second)
	decide(l, 7, "alice") // 20/h: 9 … 3 left, near at 3
	wantSeries(t, reg, "sluice_near_limit_total", map[string]float64{
		`limit="10/s gcra burst 10",limiter="api",plan=""`: 2,
		`limit="20/h gcra burst 20",limiter="api",plan=""`: 1,
	})
}
