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

// OnRefuse answers a refused request in the API's own error format; the
// chain is already aborted and the rate-limit headers are set.
func ExampleOnRefuse() {
	key, err := keyfuncs.IP()
	if err != nil {
		panic(err)
	}
	limiter, err := core.New(memorystore.New(), "search", key, []store.Limit{store.PerMinute(1)})
	if err != nil {
		panic(err)
	}
	gin.SetMode(gin.ReleaseMode)
	router := gin.New()
	api := router.Group("/api", ginlimit.New(limiter, ginlimit.OnRefuse(func(c *gin.Context, d core.Decision) {
		c.JSON(d.Response().Status, gin.H{"code": "rate_limited", "retry_after": c.Writer.Header().Get("Retry-After")})
	})))
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
	// 429 {"code":"rate_limited","retry_after":"60"}
}
