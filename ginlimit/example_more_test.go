package ginlimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/ginlimit"
	"github.com/sluicehq/sluice/keyfuncs"
)

// core.WithRefusal answers a refused request in the API's own error
// format; the middleware aborts the chain and writes it after the
// rate-limit headers.
func Example_refusal() {
	key, err := keyfuncs.IP()
	if err != nil {
		panic(err)
	}
	refusal := func(r *http.Request, d core.Decision) core.Response {
		body := fmt.Sprintf(`{"code":"rate_limited","retry_after":%.0f}`, d.Result.RetryAfter.Seconds())
		return core.Response{Status: d.Response().Status, ContentType: "application/json", Body: []byte(body)}
	}
	limiter, err := core.New(memorystore.New(), "search", key, []store.Limit{store.PerMinute(1)}, core.WithRefusal(refusal))
	if err != nil {
		panic(err)
	}
	gin.SetMode(gin.ReleaseMode)
	router := gin.New()
	api := router.Group("/api", ginlimit.New(limiter))
	api.GET("/search", func(c *gin.Context) { c.String(http.StatusOK, "results\n") })

	for i := 0; i < 2; i++ {
		r := httptest.NewRequest(http.MethodGet, "/api/search", nil)
		r.RemoteAddr = "203.0.113.7:40000"
		w := httptest.NewRecorder()
		router.ServeHTTP(w, r)
		fmt.Println(w.Code, strings.TrimSpace(w.Body.String()))
	}
	// Output:
	// 200 results
	// 429 {"code":"rate_limited","retry_after":60}
}
