package core_test

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

// A complete service: a limit of 2 requests per minute per client address
// on a route of a ServeMux, applied by the net/http adapter, and a
// GET /rate_limit route that shows the client its quota (the last
// response's X-RateLimit-Remaining, printed in quotes).
func Example() {
	ip, err := keyfuncs.IP()
	if err != nil {
		panic(err)
	}
	api, err := core.New(memorystore.New(), "api", ip, []store.Limit{store.PerMinute(2)})
	if err != nil {
		panic(err)
	}
	limited := nethttp.Middleware(api)

	mux := http.NewServeMux()
	mux.Handle("GET /hello", limited(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "hello")
	})))
	mux.HandleFunc("GET /rate_limit", func(w http.ResponseWriter, r *http.Request) {
		res, err := api.Status(r)
		if err != nil {
			http.Error(w, "no quota to show", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintf(w, "limit %d, remaining %d\n", res.Limit, res.Remaining)
	})

	get := func(path string) {
		r := httptest.NewRequest(http.MethodGet, path, nil)
		r.RemoteAddr = "203.0.113.7:41000"
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		fmt.Printf("%s: %d %q %s", path, w.Code, w.Header().Get("X-Ratelimit-Remaining"), w.Body)
	}
	get("/hello")
	get("/hello")
	get("/hello")
	get("/rate_limit")
	// Output:
	// /hello: 200 "1" hello
	// /hello: 200 "0" hello
	// /hello: 429 "0" {"error":"rate limit exceeded"}
	// /rate_limit: 200 "" limit 2, remaining 0
}
