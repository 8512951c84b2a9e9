package echolimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/labstack/echo/v4"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/echolimit"
	"github.com/sluicehq/sluice/keyfuncs"
)

// core.WithRefusal answers refused requests in the API's own format; the
// middleware writes it after the rate-limit headers and Retry-After.
func Example_refusal() {
	key, err := keyfuncs.IP()
	if err != nil {
		panic(err)
	}
	refusal := func(r *http.Request, d core.Decision) core.Response {
		return core.Response{Status: d.Response().Status, ContentType: "application/json",
			Body: []byte(`{"message":"slow down"}` + "\n")}
	}
	limiter, err := core.New(memorystore.New(), "search", key, []store.Limit{store.PerMinute(1)}, core.WithRefusal(refusal))
	if err != nil {
		panic(err)
	}
	e := echo.New()
	g := e.Group("/api", echolimit.New(limiter))
	g.GET("/search", func(c echo.Context) error { return c.String(http.StatusOK, "results\n") })

	for i := 0; i < 2; i++ {
		r := httptest.NewRequest(http.MethodGet, "/api/search", nil)
		r.RemoteAddr = "203.0.113.7:40000"
		w := httptest.NewRecorder()
		e.ServeHTTP(w, r)
		fmt.Printf("%d retry-after=%q %s", w.Code, w.Header().Get("Retry-After"), w.Body.String())
	}
	// Output:
	// 200 retry-after="" results
	// 429 retry-after="60" {"message":"slow down"}
}
