package promlimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/promlimit"
)

// One Collector observes every Limiter; the limit label names the limit
// that bound each decision. Serve the registry with promhttp.HandlerFor.
func ExampleNew() {
	reg := prometheus.NewRegistry() // nil uses prometheus.DefaultRegisterer
	metrics, err := promlimit.New(reg)
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

	mfs, err := reg.Gather()
	if err != nil {
		panic(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "sluice_decisions_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			fmt.Print(mf.GetName(), "{")
			for i, lp := range m.GetLabel() {
				if i > 0 {
					fmt.Print(",")
				}
				fmt.Printf("%s=%q", lp.GetName(), lp.GetValue())
			}
			fmt.Println("}", m.GetCounter().GetValue())
		}
	}
	// Output:
	// sluice_decisions_total{limit="2/s gcra burst 2",limiter="api",outcome="allowed",plan=""} 2
	// sluice_decisions_total{limit="2/s gcra burst 2",limiter="api",outcome="denied",plan=""} 1
}
