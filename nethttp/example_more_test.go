package nethttp_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/keyfuncs"
	"github.com/sluicehq/sluice/nethttp"
)

// OnRefuse writes your own refusal; the rate-limit headers and
// Retry-After are already set.
func ExampleOnRefuse() {
	key, err := keyfuncs.IP()
	if err != nil {
		panic(err)
	}
	limiter, err := core.New(memorystore.New(), key, []core.Limit{core.PerMinute(1)}, core.WithName("report"))
	if err != nil {
		panic(err)
	}
	refuse := nethttp.OnRefuse(func(w http.ResponseWriter, r *http.Request, d core.Decision) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(d.Response().Status)
		fmt.Fprintf(w, "%s: one report a minute, next in %ss\n", d.Outcome, w.Header().Get("Retry-After"))
	})
	report := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "report queued") })
	h := nethttp.Middleware(limiter, refuse)(report)

	for i := 0; i < 2; i++ {
		r := httptest.NewRequest(http.MethodPost, "/report", nil)
		r.RemoteAddr = "203.0.113.7:40000"
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Print(w.Code, " ", w.Body.String())
	}
	// Output:
	// 200 report queued
	// 429 denied: one report a minute, next in 60s
}
