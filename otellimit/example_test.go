package otellimit_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/otellimit"
)

// One Recorder observes every Limiter; the limit attribute names the limit
// that bound each decision. A service passes its own MeterProvider (often
// otel.GetMeterProvider()) with a periodic reader and an exporter; this
// one is read by hand.
func ExampleNew() {
	reader := sdkmetric.NewManualReader()
	metrics, err := otellimit.New(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	if err != nil {
		panic(err)
	}

	now := func() time.Time { return time.Unix(1_700_000_000, 0) } // a stopped clock, for the example
	byClient := func(r *http.Request) (string, error) { return r.Header.Get("X-Client"), nil }
	limiter, err := core.New(memorystore.New(memorystore.WithClock(now)),

		"api", byClient,
		[]store.Limit{store.PerSecond(2)},
		core.WithClock(now), core.WithObserver(metrics.Observe))
	if err != nil {
		panic(err)
	}

	for i := 0; i < 3; i++ {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.Header.Set("X-Client", "alice")
		limiter.Decide(r)
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		panic(err)
	}
	var lines []string
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			sum, ok := m.Data.(metricdata.Sum[int64])
			if !ok || m.Name != "sluice.decisions" {
				continue
			}
			for _, dp := range sum.DataPoints {
				line := m.Name
				for _, kv := range dp.Attributes.ToSlice() { // sorted by key
					line += fmt.Sprintf(" %s=%q", kv.Key, kv.Value.Emit())
				}
				lines = append(lines, fmt.Sprintf("%s %d", line, dp.Value))
			}
		}
	}
	sort.Strings(lines)
	for _, l := range lines {
		fmt.Println(l)
	}
	// Output:
	// sluice.decisions limit="2/s gcra burst 2" limiter="api" outcome="allowed" plan="" 2
	// sluice.decisions limit="2/s gcra burst 2" limiter="api" outcome="denied" plan="" 1
}
