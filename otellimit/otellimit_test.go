package otellimit_test

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

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/core/storetest"
	"github.com/sluicehq/sluice/internal/fallback"
	"github.com/sluicehq/sluice/internal/partial"
	"github.com/sluicehq/sluice/otellimit"
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
	fail atomic.Bool
	next store.Store
}

var errDown = errors.New("store down")

func (s *flakyStore) Take(ctx context.Context, key string, n int64, limits ...store.Spec) (store.Result, error) {
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

// newRecorder returns a Recorder on a MeterProvider read by the returned
// ManualReader.
func newRecorder(t *testing.T, opts ...otellimit.Option) (*otellimit.Recorder, *sdkmetric.ManualReader) {
	t.Helper()
	rd := sdkmetric.NewManualReader()
	rec, err := otellimit.New(sdkmetric.NewMeterProvider(sdkmetric.WithReader(rd)), opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return rec, rd
}

// collect returns the metrics rd reads, by instrument name; it fails t if
// any has another scope than otellimit's.
func collect(t *testing.T, rd sdkmetric.Reader) map[string]metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := rd.Collect(context.Background(), &rm); err != nil {
		t.Fatalf("Collect: %v", err)
	}
	out := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != "github.com/sluicehq/sluice/otellimit" {
			t.Errorf("scope %q, want %q", sm.Scope.Name, "github.com/sluicehq/sluice/otellimit")
		}
		for _, m := range sm.Metrics {
			out[m.Name] = m
		}
	}
	return out
}

// series returns the data points of the instrument name, by their
// attributes rendered as `a="x",b="y"` (sorted by key): a counter's value
// or a histogram's count.
func series(t *testing.T, rd sdkmetric.Reader, name string) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	switch data := collect(t, rd)[name].Data.(type) {
	case nil:
	case metricdata.Sum[int64]:
		if !data.IsMonotonic || data.Temporality != metricdata.CumulativeTemporality {
			t.Errorf("%s: monotonic %v, temporality %v", name, data.IsMonotonic, data.Temporality)
		}
		for _, dp := range data.DataPoints {
			out[attrString(dp.Attributes)] = float64(dp.Value)
		}
	case metricdata.Sum[float64]:
		for _, dp := range data.DataPoints {
			out[attrString(dp.Attributes)] = dp.Value
		}
	case metricdata.Gauge[float64]:
		for _, dp := range data.DataPoints {
			out[attrString(dp.Attributes)] = dp.Value
		}
	case metricdata.Histogram[float64]:
		for _, dp := range data.DataPoints {
			out[attrString(dp.Attributes)] = float64(dp.Count)
		}
	default:
		t.Fatalf("%s: unexpected data %T", name, data)
	}
	return out
}

func attrString(s attribute.Set) string {
	parts := make([]string, 0, s.Len())
	for _, kv := range s.ToSlice() {
		parts = append(parts, fmt.Sprintf("%s=%q", kv.Key, kv.Value.Emit()))
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

func wantSeries(t *testing.T, rd sdkmetric.Reader, name string, want map[string]float64) {
	t.Helper()
	if got := series(t, rd, name); !reflect.DeepEqual(got, want) {
		t.Errorf("%s:\n got %v\nwant %v", name, got, want)
	}
}

// zeroErrors are the five store error series of limiter at 0.
func zeroErrors(limiter string) map[string]float64 {
	m := map[string]float64{}
	for _, k := range []string{"breaker_open", "canceled", "error", "oom", "timeout"} {
		m[fmt.Sprintf("kind=%q,limiter=%q", k, limiter)] = 0
	}
	return m
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
	rec, rd := newRecorder(t)
	clock := newClock()
	st := memorystore.New(memorystore.WithClock(clock.Now))
	l := newLimiter(t, st, "api", []store.Limit{store.PerSecond(2)}, core.WithClock(clock.Now), core.WithObserver(rec.Observe),
		core.WithKeyErrorRule(core.KeyErrorDeny, nil))

	decide(l, 3, "alice") // 2 allowed, 1 denied
	decide(l, 1, "bob")   // allowed: another client
	decide(l, 2, "")      // no key: KeyErrorDeny

	wantSeries(t, rd, "sluice.decisions", map[string]float64{
		`limit="2/s gcra burst 2",limiter="api",outcome="allowed",plan=""`: 3,
		`limit="2/s gcra burst 2",limiter="api",outcome="denied",plan=""`:  1,
		`limit="none",limiter="api",outcome="key_error",plan=""`:           2,
	})
	// Only the four decisions that called the store are timed.
	wantSeries(t, rd, "sluice.store.latency", map[string]float64{`limiter="api"`: 4})
	wantSeries(t, rd, "sluice.store.errors", zeroErrors("api"))

	// alice's second request left 2/s nothing: near the limit.
	wantSeries(t, rd, "sluice.near_limit", map[string]float64{`limit="2/s gcra burst 2",limiter="api",plan=""`: 1})

	ms := collect(t, rd)
	if len(ms) != 4 {
		t.Errorf("%d instruments, want 4", len(ms))
	}
	for name, unit := range map[string]string{
		"sluice.decisions": "{decision}", "sluice.store.latency": "s", "sluice.store.errors": "{error}", "sluice.near_limit": "{decision}",
	} {
		if m := ms[name]; m.Unit != unit || m.Description == "" {
			t.Errorf("%s: unit %q, description %q; want unit %q", name, m.Unit, m.Description, unit)
		}
	}
	hist := ms["sluice.store.latency"].Data.(metricdata.Histogram[float64]).DataPoints[0]
	if !reflect.DeepEqual(hist.Bounds, []float64{0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1}) {
		t.Errorf("bounds %v, want DefaultLatencyBuckets", hist.Bounds)
	}
	// A memory store answers in well under a second: no sample in the
	// +Inf bucket, and the sum is plausible seconds, not nanoseconds.
	if n := hist.BucketCounts[len(hist.BucketCounts)-1]; n != 0 || hist.Sum <= 0 || hist.Sum >= 4 {
		t.Errorf("latency: %d samples over 1s, sum %v", n, hist.Sum)
	}
}

// The limit attribute is the Event's binding limit, defaults spelt out:
// equal limits get equal values however written, and a change of limits
// shows at the next decision.
func TestLimitAttribute(t *testing.T) {
	rec, rd := newRecorder(t)
	clock := newClock()
	st := memorystore.New(memorystore.WithClock(clock.Now))
	opts := func(name string) []core.Option {
		return []core.Option{core.WithClock(clock.Now), core.WithObserver(rec.Observe)}
	}
	// The hourly limit binds: allowed while it has the least remaining,
	// then it denies.
	l := newLimiter(t, st, "api", []store.Limit{store.PerSecond(10), {Rate: 2, Period: time.Hour}}, opts("api")...)
	decide(l, 3, "alice")
	l2 := newLimiter(t, st, "web", []store.Limit{{Algorithm: store.GCRA, Rate: 2, Period: time.Hour, Burst: 2}}, opts("web")...)
	decide(l2, 1, "alice")
	if err := l.SetLimits([]store.Limit{{Rate: 5, Period: time.Hour, Algorithm: store.FixedWindow, Penalty: time.Minute}}); err != nil {
		t.Fatal(err)
	}
	decide(l, 1, "carol")

	wantSeries(t, rd, "sluice.decisions", map[string]float64{
		`limit="2/h gcra burst 2",limiter="api",outcome="allowed",plan=""`:            2,
		`limit="2/h gcra burst 2",limiter="api",outcome="denied",plan=""`:             1,
		`limit="2/h gcra burst 2",limiter="web",outcome="allowed",plan=""`:            1,
		`limit="5/h fixed_window penalty 1m",limiter="api",outcome="allowed",plan=""`: 1,
	})
}

// The plan attribute is Event.Plan, and "" (PlanNone) for the Limiter's
// own limits.
func TestPlanAttribute(t *testing.T) {
	rec, rd := newRecorder(t)
	clock := newClock()
	st := memorystore.New(memorystore.WithClock(clock.Now))
	planOf := func(r *http.Request) string { return r.Header.Get("X-Plan") }
	plans := map[string][]store.Limit{"free": {store.PerMinute(1)}, "pro": {store.PerMinute(100)}}
	l := newLimiter(t, st, "api", []store.Limit{store.PerMinute(1)}, core.WithClock(clock.Now),
		core.WithObserver(rec.Observe), core.WithPlans(planOf, plans))
	for _, rq := range []struct{ client, plan string }{
		{"a", "free"}, {"a", "free"}, {"b", "pro"}, {"c", ""}, {"d", "unknown"},
	} {
		r := request(rq.client)
		r.Header.Set("X-Plan", rq.plan)
		l.Decide(r)
	}
	wantSeries(t, rd, "sluice.decisions", map[string]float64{
		`limit="1/m gcra burst 1",limiter="api",outcome="allowed",plan="free"`:    1,
		`limit="1/m gcra burst 1",limiter="api",outcome="denied",plan="free"`:     1,
		`limit="100/m gcra burst 100",limiter="api",outcome="allowed",plan="pro"`: 1,
		`limit="1/m gcra burst 1",limiter="api",outcome="allowed",plan=""`:        2,
	})
}

// A failing store: its errors are counted, and fallback decisions are
// split by what the local store decided.
func TestFailingStoreFallback(t *testing.T) {
	rec, rd := newRecorder(t)
	clock := newClock()
	st := &flakyStore{next: memorystore.New(memorystore.WithClock(clock.Now))}
	local := memorystore.New(memorystore.WithClock(clock.Now))
	newL := func(name string, more ...core.Option) *core.Limiter {
		return newLimiter(t, fallback.New(st, fallback.Config{Local: local}), name, []store.Limit{store.PerSecond(3)}, append([]core.Option{
			core.WithClock(clock.Now), core.WithObserver(rec.Observe)}, more...)...)
	}
	l := newL("api")
	shadow := newL("shadow", core.WithShadow())

	st.fail.Store(true)
	decide(l, 4, "alice")    // the local store allows 3 and denies the 4th
	decide(shadow, 4, "bob") // the same, served anyway
	st.fail.Store(false)
	decide(l, 1, "carol") // the store is back

	wantSeries(t, rd, "sluice.decisions", map[string]float64{
		`limit="3/s gcra burst 3",limiter="api",outcome="fallback_allowed",plan=""`:    3,
		`limit="3/s gcra burst 3",limiter="api",outcome="fallback_denied",plan=""`:     1,
		`limit="3/s gcra burst 3",limiter="api",outcome="allowed",plan=""`:             1,
		`limit="3/s gcra burst 3",limiter="shadow",outcome="fallback_allowed",plan=""`: 3,
		`limit="3/s gcra burst 3",limiter="shadow",outcome="fallback_denied",plan=""`:  1,
	})
	want := zeroErrors("api")
	for k, v := range zeroErrors("shadow") {
		want[k] = v
	}
	want[`kind="error",limiter="api"`] = 4
	want[`kind="error",limiter="shadow"`] = 4
	wantSeries(t, rd, "sluice.store.errors", want)
	// The local store was timed every time, the store once more.
	wantSeries(t, rd, "sluice.store.latency", map[string]float64{`limiter="api"`: 5, `limiter="shadow"`: 4})
}

func TestOutcomes(t *testing.T) {
	rec, rd := newRecorder(t)
	clock := newClock()
	mem := memorystore.New(memorystore.WithClock(clock.Now))
	down := &flakyStore{next: mem}
	down.fail.Store(true)
	opts := func(name string, more ...core.Option) []core.Option {
		return append([]core.Option{core.WithClock(clock.Now), core.WithObserver(rec.Observe)}, more...)
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
	wantSeries(t, rd, "sluice.decisions", map[string]float64{
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
	var nonzero []string
	for k, v := range series(t, rd, "sluice.store.errors") {
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
	lat := series(t, rd, "sluice.store.latency")
	for name, calls := range map[string]float64{"shadow": 2, "leaky": 2, "open": 2, "closed": 2, "skip": 0, "keyallow": 0, "slow": 1, "neg": 1} {
		if got := lat[fmt.Sprintf("limiter=%q", name)]; got != calls {
			t.Errorf("latency samples of %s = %v, want %v", name, got, calls)
		}
	}
}

// Events from a caller other than a Limiter: a canceled context, an open
// breaker, an outcome core does not define yet, an invalid limit, and
// attribute values that are not UTF-8.
func TestObserveEvents(t *testing.T) {
	rec, rd := newRecorder(t, otellimit.WithNamespace("x"))
	lim := store.Limit{Algorithm: store.TokenBucket, Rate: 7, Period: time.Minute}
	rec.Observe(core.Event{Limiter: "a", Outcome: core.OutcomeFailedOpen, Err: fmt.Errorf("take: %w", context.Canceled), Latency: time.Millisecond})
	rec.Observe(core.Event{Limiter: "a", Outcome: core.Outcome(200)})
	rec.Observe(core.Event{Limiter: "a", Outcome: core.Outcome(200)})
	rec.Observe(core.Event{Limiter: "a", Plan: "p", Outcome: core.OutcomeFallback, Limit: lim,
		Err: fmt.Errorf("redis: %w", store.ErrBreakerOpen), Result: store.Result{Allowed: true, Limit: 7}})
	rec.Observe(core.Event{Limiter: "a", Plan: "p", Outcome: core.OutcomeFallback, Limit: lim,
		Err: store.ErrBreakerOpen, Action: core.Refuse})
	rec.Observe(core.Event{Limiter: "a", Outcome: core.OutcomeDenied, Limit: store.Limit{Rate: -1, Period: time.Second}})
	rec.Observe(core.Event{Limiter: "\xff", Plan: "\xfe", Outcome: core.OutcomeAllowed})
	wantSeries(t, rd, "x.decisions", map[string]float64{
		`limit="none",limiter="a",outcome="failed_open",plan=""`:                                     1,
		`limit="none",limiter="a",outcome="outcome(200)",plan=""`:                                    2,
		`limit="7/m token_bucket burst 7",limiter="a",outcome="fallback_allowed",plan="p"`:           1,
		`limit="7/m token_bucket burst 7",limiter="a",outcome="fallback_denied",plan="p"`:            1,
		`limit="-1/s",limiter="a",outcome="denied",plan=""`:                                          1,
		fmt.Sprintf("limit=%q,limiter=%q,outcome=%q,plan=%q", "none", "\uFFFD", "allowed", "\uFFFD"): 1,
	})
	errs := series(t, rd, "x.store.errors")
	if errs[`kind="canceled",limiter="a"`] != 1 || errs[`kind="breaker_open",limiter="a"`] != 2 || errs[`kind="error",limiter="a"`] != 0 {
		t.Errorf("store errors: %v", errs)
	}
	wantSeries(t, rd, "x.store.latency", map[string]float64{`limiter="a"`: 1})
}

func TestOptions(t *testing.T) {
	rec, rd := newRecorder(t,
		otellimit.WithNamespace(""),
		otellimit.WithLatencyBuckets(0.001, 0.01),
		otellimit.WithAttributes(attribute.String("service", "cart")),
		otellimit.WithAttributes(attribute.String("service", "shop")), // the later wins
		nil, // ignored, like core's
	)
	rec.Observe(core.Event{Limiter: "api", Outcome: core.OutcomeDenied, Latency: 5 * time.Millisecond,
		Limit: store.Limit{Algorithm: store.TokenBucket, Rate: 5, Period: time.Minute}, Result: store.Result{Limit: 5},
		Err: errDown})
	wantSeries(t, rd, "decisions", map[string]float64{
		`limit="5/m token_bucket burst 5",limiter="api",outcome="denied",plan="",service="shop"`: 1,
	})
	if got := series(t, rd, "store.errors")[`kind="error",limiter="api",service="shop"`]; got != 1 {
		t.Errorf("store errors %v", series(t, rd, "store.errors"))
	}
	dps := collect(t, rd)["store.latency"].Data.(metricdata.Histogram[float64]).DataPoints
	if len(dps) != 1 || attrString(dps[0].Attributes) != `limiter="api",service="shop"` {
		t.Fatalf("latency data points %v", dps)
	}
	if !reflect.DeepEqual(dps[0].Bounds, []float64{0.001, 0.01}) || !reflect.DeepEqual(dps[0].BucketCounts, []uint64{0, 1, 0}) {
		t.Errorf("bounds %v counts %v", dps[0].Bounds, dps[0].BucketCounts)
	}
}

func TestBadOptions(t *testing.T) {
	for name, opt := range map[string]otellimit.Option{
		"no buckets":         otellimit.WithLatencyBuckets(),
		"NaN bucket":         otellimit.WithLatencyBuckets(0.1, math.NaN()),
		"Inf bucket":         otellimit.WithLatencyBuckets(0.1, math.Inf(1)),
		"decreasing buckets": otellimit.WithLatencyBuckets(0.1, 0.01),
		"equal buckets":      otellimit.WithLatencyBuckets(0.1, 0.1),
		"reserved key":       otellimit.WithAttributes(attribute.String("limiter", "x")),
		"kind key":           otellimit.WithAttributes(attribute.Int("kind", 1)),
		"empty key":          otellimit.WithAttributes(attribute.String("", "x")),
		"invalid value":      otellimit.WithAttributes(attribute.KeyValue{Key: "k"}),
		"value not UTF-8":    otellimit.WithAttributes(attribute.String("ok", "\xff")),
		"namespace":          otellimit.WithNamespace("bad ns"),
		"namespace digit":    otellimit.WithNamespace("1ns"),
		"namespace dot":      otellimit.WithNamespace(".ns"),
		"namespace long":     otellimit.WithNamespace(strings.Repeat("n", 201)),
	} {
		rec, err := otellimit.New(sdkmetric.NewMeterProvider(), opt)
		if !errors.Is(err, core.ErrInvalidOption) || rec != nil {
			t.Errorf("%s: %v, %v; want ErrInvalidOption", name, rec, err)
		}
	}
	for _, ns := range []string{"a", "A", "my_app.rate-limit/v2", strings.Repeat("n", 200)} {
		rd := sdkmetric.NewManualReader()
		rec, err := otellimit.New(sdkmetric.NewMeterProvider(sdkmetric.WithReader(rd)), otellimit.WithNamespace(ns))
		if err != nil {
			t.Errorf("namespace %q: %v", ns, err)
			continue
		}
		rec.Observe(core.Event{Limiter: "api", Latency: time.Millisecond})
		if len(series(t, rd, ns+".store.latency")) != 1 {
			t.Errorf("namespace %q: no %s.store.latency", ns, ns)
		}
	}
	if rec, err := otellimit.New(nil); err == nil || rec != nil {
		t.Errorf("New(nil) = %v, %v; want an error", rec, err)
	}
}

// Observe records with the request's context: a traced request's span is
// the exemplar of its measurements.
func TestRequestContext(t *testing.T) {
	rd := sdkmetric.NewManualReader()
	rec, err := otellimit.New(sdkmetric.NewMeterProvider(sdkmetric.WithReader(rd)))
	if err != nil {
		t.Fatal(err)
	}
	clock := newClock()
	l := newLimiter(t, memorystore.New(memorystore.WithClock(clock.Now)), "test", []store.Limit{store.PerSecond(1)},
		core.WithClock(clock.Now), core.WithObserver(rec.Observe))
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5, 6}, TraceFlags: trace.FlagsSampled,
	})
	r := request("alice")
	l.Decide(r.WithContext(trace.ContextWithSpanContext(r.Context(), sc)))

	dps := collect(t, rd)["sluice.decisions"].Data.(metricdata.Sum[int64]).DataPoints
	if len(dps) != 1 || len(dps[0].Exemplars) != 1 {
		t.Fatalf("data points %+v; want one with one exemplar", dps)
	}
	if ex, id := dps[0].Exemplars[0], sc.TraceID(); !reflect.DeepEqual(ex.TraceID, id[:]) {
		t.Errorf("exemplar trace id %x, want %s", ex.TraceID, sc.TraceID())
	}
}

// Concurrent decisions on several limiters, plans and limits, each seen
// for the first time by several goroutines at once: no count is lost (run
// with -race).
func TestConcurrentObserve(t *testing.T) {
	rec, rd := newRecorder(t)
	const goroutines, each = 8, 500
	var wg sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			name := fmt.Sprintf("l%d", g%3)
			for i := 0; i < each; i++ {
				rec.Observe(core.Event{Limiter: name, Plan: fmt.Sprint(i % 2), Outcome: core.Outcome(i % 3),
					Limit: store.PerSecond(int64(1 + i%5)), Latency: time.Microsecond})
			}
		}(g)
	}
	wg.Wait()
	var total, samples float64
	decisions := series(t, rd, "sluice.decisions")
	for _, v := range decisions {
		total += v
	}
	for _, v := range series(t, rd, "sluice.store.latency") {
		samples += v
	}
	if total != goroutines*each || samples != goroutines*each {
		t.Errorf("decisions %v, latency samples %v; want %d", total, samples, goroutines*each)
	}
	// plan, limit and outcome go together: i%2, i%5 and i%3 take 30
	// combinations, for each of 3 limiters.
	if len(decisions) != 3*30 {
		t.Errorf("%d series, want 90", len(decisions))
	}
}

// benchEvents are decisions of every kind of limiter, plan, limit and
// outcome: a plan and a limit, the fallback split, no store.
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

// Observe adds no allocation of its own once a series has been seen: the
// no-op provider's instruments do nothing, so what is measured is the
// Recorder's lookup (the SDK's own cost is in BenchmarkObserve).
func TestObserveDoesNotAllocate(t *testing.T) {
	rec, err := otellimit.New(noop.NewMeterProvider())
	if err != nil {
		t.Fatal(err)
	}
	evs := benchEvents()
	for _, ev := range evs {
		rec.Observe(ev) // first sight builds the attribute sets
	}
	allocs := testing.AllocsPerRun(100, func() {
		for _, ev := range evs {
			rec.Observe(ev)
		}
	})
	if allocs != 0 {
		t.Errorf("Observe allocates: %v per %d events", allocs, len(evs))
	}
}

func BenchmarkObserve(b *testing.B) {
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	rec, err := otellimit.New(mp)
	if err != nil {
		b.Fatal(err)
	}
	for i, name := range []string{"allowed", "denied", "fallback-timeout", "fallback-breaker", "skipped"} {
		ev := benchEvents()[i]
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for n := 0; n < b.N; n++ {
				rec.Observe(ev)
			}
		})
	}
	// For comparison: the allowed decision's counter with its attributes
	// built on each call, as without the Recorder's cache.
	ev := benchEvents()[0]
	counter, err := mp.Meter("cmp").Int64Counter("cmp")
	if err != nil {
		b.Fatal(err)
	}
	b.Run("attributes-per-call", func(b *testing.B) {
		b.ReportAllocs()
		for n := 0; n < b.N; n++ {
			counter.Add(context.Background(), 1, metric.WithAttributes(
				attribute.String("limiter", ev.Limiter), attribute.String("plan", ev.Plan),
				attribute.String("limit", ev.Limit.String()), attribute.String("outcome", ev.Outcome.String())))
		}
	})
}

// A MaxInFlight limit's attribute names the in_flight algorithm (issue 21).
func TestInFlightLabel(t *testing.T) {
	rec, rd := newRecorder(t, otellimit.WithNamespace(""))
	rec.Observe(core.Event{Limiter: "export", Outcome: core.OutcomeDenied,
		Limit: store.MaxInFlight(3, 10*time.Second), Result: store.Result{Limit: 3}})
	wantSeries(t, rd, "decisions", map[string]float64{
		`limit="3/10s in_flight",limiter="export",outcome="denied",plan=""`: 1,
	})
}

// sluice.near_limit counts the admitted decisions that left a limit less
// than a fifth of its capacity, with that limit as attribute, as promlimit
// does.
func TestNearLimit(t *testing.T) {
	rec, rd := newRecorder(t)
	clock := newClock()
	st := memorystore.New(memorystore.WithClock(clock.Now))
	l := newLimiter(t, st, "api", []store.Limit{store.PerSecond(10), store.PerHour(20)}, core.WithClock(clock.Now), core.WithObserver(rec.Observe))
	decide(l, 11, "alice")
	clock.Advance(time.Second)
	decide(l, 7, "alice")
	wantSeries(t, rd, "sluice.near_limit", map[string]float64{
		`limit="10/s gcra burst 10",limiter="api",plan=""`: 2,
		`limit="20/h gcra burst 20",limiter="api",plan=""`: 1,
	})
	if m := collect(t, rd)["sluice.near_limit"]; m.Unit != "{decision}" || m.Description == "" {
		t.Errorf("unit %q, description %q", m.Unit, m.Description)
	}
}
