package sluice_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/labstack/echo/v4"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/echolimit"
	"github.com/sluicehq/sluice/ginlimit"
	"github.com/sluicehq/sluice/nethttp"
)

// loginApps are the login route through each adapter: the handler counts
// its calls and answers 200 for the password "good" and 401 otherwise,
// each in its framework's usual way (net/http: a 200 by writing the body
// without WriteHeader; echo: a 401 by returning an *echo.HTTPError).
var loginApps = []struct {
	name  string
	build func(l *core.Limiter, calls *atomic.Int64) http.Handler
}{
	{"nethttp", func(l *core.Limiter, calls *atomic.Int64) http.Handler {
		mux := http.NewServeMux()
		mux.Handle("POST /login", nethttp.Middleware(l)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			calls.Add(1)
			if r.Header.Get("X-Password") != "good" {
				w.WriteHeader(http.StatusUnauthorized)
				return
			}
			_, _ = io.WriteString(w, "welcome")
		})))
		return mux
	}},
	{"gin", func(l *core.Limiter, calls *atomic.Int64) http.Handler {
		r := gin.New()
		r.POST("/login", ginlimit.New(l), func(c *gin.Context) {
			calls.Add(1)
			if c.GetHeader("X-Password") != "good" {
				c.AbortWithStatus(http.StatusUnauthorized)
				return
			}
			c.String(http.StatusOK, "welcome")
		})
		return r
	}},
	{"echo", func(l *core.Limiter, calls *atomic.Int64) http.Handler {
		e := echo.New()
		e.POST("/login", func(c echo.Context) error {
			calls.Add(1)
			if c.Request().Header.Get("X-Password") != "good" {
				return echo.NewHTTPError(http.StatusUnauthorized)
			}
			return c.String(http.StatusOK, "welcome")
		}, echolimit.New(l))
		return e
	}},
}

// Login protection (issue 19, point 2): a Limiter of 3 per hour per IP
// that counts only failures (WithCountIf, status >= 400), through each
// adapter, on each store, for each algorithm but LeakyBucket (which holds
// requests): 10 successful logins pass; then 3 failures pass and the
// fourth attempt, good password or not, is refused; and 20 concurrent
// failures on a fresh account reach the handler exactly 3 times.
func TestMiddlewareCountIf(t *testing.T) {
	algorithms := []store.Algorithm{store.FixedWindow, store.GCRA, store.TokenBucket, store.SlidingLog, store.SlidingWindow}
	for _, kind := range storeKinds {
		t.Run(kind.name, func(t *testing.T) {
			newEnv := kind.prepare(t)
			for _, app := range loginApps {
				for _, alg := range algorithms {
					t.Run(app.name+"/"+string(alg), func(t *testing.T) {
						t.Parallel()
						e := newEnv(t)
						s := &setup{t: t, e: e, store: e.live}
						l := s.limiter("login", mustIP(t), []store.Limit{{Algorithm: alg, Rate: 3, Period: time.Hour}},
							core.WithCountIf(func(status int) bool { return status >= 400 }))
						var calls atomic.Int64
						loginCountIf(t, app.build(l, &calls), &calls)
					})
				}
			}
		})
	}
}

func loginCountIf(t *testing.T, h http.Handler, calls *atomic.Int64) {
	login := func(ip, password string) int {
		r := httptest.NewRequest(http.MethodPost, "/login", nil)
		r.RemoteAddr = ip + ":1234"
		r.Header.Set("X-Password", password)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	for i := range 10 {
		if got := login("192.0.2.1", "good"); got != http.StatusOK {
			t.Fatalf("successful login %d: status %d, want 200", i+1, got)
		}
	}
	for i := range 3 {
		if got := login("192.0.2.1", "bad"); got != http.StatusUnauthorized {
			t.Fatalf("failed login %d: status %d, want 401", i+1, got)
		}
	}
	for _, pw := range []string{"bad", "good"} {
		if got := login("192.0.2.1", pw); got != http.StatusTooManyRequests {
			t.Errorf("login (%s password) after 3 failures: status %d, want 429", pw, got)
		}
	}
	if n := calls.Load(); n != 13 {
		t.Errorf("the handler ran %d times, want 13", n)
	}

	calls.Store(0)
	var wg sync.WaitGroup
	var refused atomic.Int64
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if login("192.0.2.2", "bad") == http.StatusTooManyRequests {
				refused.Add(1)
			}
		}()
	}
	wg.Wait()
	if n, r := calls.Load(), refused.Load(); n != 3 || r != 17 {
		t.Errorf("20 concurrent failures on a fresh account: the handler ran %d times and %d were refused, want 3 and 17", n, r)
	}
}
