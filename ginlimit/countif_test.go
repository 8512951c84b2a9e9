package ginlimit_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/ginlimit"
)

// With WithCountIf, the middleware runs the chain and reads its status: a
// handler that writes nothing is a 200 (given back), a panic a 500
// (counted, and the panic goes on).
func TestCountIfStatus(t *testing.T) {
	l := newLimiter(t, byHeader, []store.Limit{{Algorithm: store.FixedWindow, Rate: 1, Period: time.Minute}},
		core.WithCountIf(func(s int) bool { return s >= 400 }))
	r := gin.New()
	r.GET("/", ginlimit.New(l), func(c *gin.Context) {
		if c.GetHeader("X-Do") == "panic" {
			panic("handler failed")
		}
	})
	serve := func(do string) (code int, panicked bool) {
		defer func() { panicked = recover() != nil }()
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.Header.Set("X-Client", "a")
		req.Header.Set("X-Do", do)
		w := httptest.NewRecorder()
		r.ServeHTTP(w, req)
		return w.Code, false
	}
	for i := range 3 {
		if code, _ := serve("nothing"); code != http.StatusOK {
			t.Fatalf("request %d: status %d, want 200 (a limit of 1, given back)", i, code)
		}
	}
	if _, panicked := serve("panic"); !panicked {
		t.Fatal("the handler's panic did not go on")
	}
	if code, _ := serve("nothing"); code != http.StatusTooManyRequests {
		t.Errorf("after a panic: status %d, want 429 (the panic counts as a 500)", code)
	}
}
