package nethttp_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/nethttp"
)

// Each route gets its own Limiter; here two requests a minute per client
// (identified by a header, for the example: see package keyfuncs for real
// key functions).
func ExampleMiddleware() {
	byClient := func(r *http.Request) (string, error) {
		if k := r.Header.Get("X-Client"); k != "" {
			return k, nil
		}
		return "", core.ErrNoKey
	}
	limiter, err := core.New(memorystore.New(), "hello", byClient, []store.Limit{store.PerMinute(2)})
	if err != nil {
		panic(err)
	}
	hello := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "hello")
	})
	mux := http.NewServeMux()
	mux.Handle("GET /hello", nethttp.Middleware(limiter)(hello))

	for i := 0; i < 3; i++ {
		r := httptest.NewRequest(http.MethodGet, "/hello", nil)
		r.Header.Set("X-Client", "alice")
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		fmt.Printf("%d remaining=%s retry-after=%q %s", w.Code,
			w.Header().Get("X-RateLimit-Remaining"), w.Header().Get("Retry-After"), w.Body.String())
	}
	// Output:
	// 200 remaining=1 retry-after="" hello
	// 200 remaining=0 retry-after="" hello
	// 429 remaining=0 retry-after="30" {"error":"rate limit exceeded"}
}
