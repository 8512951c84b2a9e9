package nethttp_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/keyfuncs"
	"github.com/sluicehq/sluice/nethttp"
)

// core.WithRefusal sets your own refusal; the middleware writes it after
// the rate-limit headers and Retry-After.
func Example_refusal() {
	key, err := keyfuncs.IP()
	if err != nil {
		panic(err)
	}
	refusal := func(r *http.Request, d core.Decision) core.Response {
		body := fmt.Sprintf("%s: one report a minute, next in %.0fs\n", d.Outcome, d.Result.RetryAfter.Seconds())
		return core.Response{Status: d.Response().Status, ContentType: "text/plain; charset=utf-8", Body: []byte(body)}
	}
	limiter, err := core.New(memorystore.New(), "report", key, []store.Limit{store.PerMinute(1)}, core.WithRefusal(refusal))
	if err != nil {
		panic(err)
	}
	report := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "report queued") })
	h := nethttp.Middleware(limiter)(report)

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

// A site-wide Limiter around the mux and a route's inside it: the response
// carries the binding one's headers (the least remaining), and the handler
// reads the same Decision with core.FromContext.
func Example_stacked() {
	key, err := keyfuncs.IP()
	if err != nil {
		panic(err)
	}
	st := memorystore.New()
	site, err := core.New(st, "site", key, []store.Limit{store.PerHour(3)})
	if err != nil {
		panic(err)
	}
	search, err := core.New(st, "search", key, []store.Limit{store.PerHour(100)})
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /search", nethttp.Middleware(search)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d, _ := core.FromContext(r.Context())
		fmt.Fprintf(w, "results; %d of %d left\n", d.Result.Remaining, d.Result.Limit)
	})))
	h := nethttp.Middleware(site)(mux)

	for i := 0; i < 4; i++ {
		r := httptest.NewRequest(http.MethodGet, "/search", nil)
		r.RemoteAddr = "203.0.113.7:40000"
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Print(w.Code, " limit ", w.Header().Get("X-RateLimit-Limit"), " remaining ", w.Header().Get("X-RateLimit-Remaining"), ": ", w.Body.String())
	}
	// Output:
	// 200 limit 3 remaining 2: results; 2 of 3 left
	// 200 limit 3 remaining 1: results; 1 of 3 left
	// 200 limit 3 remaining 0: results; 0 of 3 left
	// 429 limit 3 remaining 0: {"error":"rate limit exceeded"}
}
