package ginlimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/ginlimit"
)

func init() { gin.SetMode(gin.TestMode) }

var t0 = time.Unix(1_700_000_000, 0)

func byHeader(r *http.Request) (string, error) {
	if k := r.Header.Get("X-Client"); k != "" {
		return k, nil
	}
	return "", core.ErrNoKey
}

func newLimiter(t *testing.T, key core.KeyFunc, limits []store.Limit, opts ...core.Option) *core.Limiter {
	t.Helper()
	now := func() time.Time { return t0 }
	st := memorystore.New(memorystore.WithClock(now))
	l, err := core.New(st, "test", key, limits, append([]core.Option{core.WithClock(now)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func get(h http.Handler, path, client string, ctx context.Context) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodGet, path, nil)
	if ctx != nil {
		r = r.WithContext(ctx)
	}
	if client != "" {
		r.Header.Set("X-Client", client)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// A refusal aborts gin's chain: neither a later middleware nor the handler
// runs. (The refusal's status, headers and body: middleware_test.go.)
func TestDenyAborts(t *testing.T) {
	router := gin.New()
	var later, handled int
	router.Use(ginlimit.New(newLimiter(t, byHeader, []store.Limit{store.PerMinute(1)})))
	router.Use(func(c *gin.Context) { later++ })
	router.GET("/", func(c *gin.Context) { handled++; c.String(http.StatusOK, "ok") })
	for i, want := range []int{200, 429, 429} {
		if w := get(router, "/", "a", nil); w.Code != want {
			t.Fatalf("request %d: %d, want %d", i+1, w.Code, want)
		}
	}
	if later != 1 || handled != 1 {
		t.Fatalf("after two denials: later middleware ran %d times, handler %d; want 1 and 1 (Abort stops the chain)", later, handled)
	}
}

func TestRouteLevelAndFullPath(t *testing.T) {
	byRoute := func(r *http.Request) (string, error) {
		if r.Pattern == "" {
			return "", core.ErrNoKey
		}
		return r.Pattern, nil
	}
	var patterns []string
	router := gin.New()
	router.GET("/users/:id", ginlimit.New(newLimiter(t, byRoute, []store.Limit{store.PerMinute(1)}, core.WithKeyErrorRule(core.KeyErrorDeny, nil))),
		func(c *gin.Context) { patterns = append(patterns, c.Request.Pattern); c.String(http.StatusOK, "ok") })
	var codes []int
	for _, path := range []string{"/users/1", "/users/2"} {
		codes = append(codes, get(router, path, "", nil).Code)
	}
	if codes[0] != 200 || codes[1] != 429 {
		t.Fatalf("codes %v: /users/1 and /users/2 must share the route's limit", codes)
	}
	if len(patterns) != 1 || patterns[0] != "GET /users/:id" {
		t.Fatalf("handler saw patterns %v, want [GET /users/:id]", patterns)
	}
}

// A refusal set with core.WithRefusal is written after the headers, the
// chain aborted.
func TestRefusal(t *testing.T) {
	router := gin.New()
	handled := 0
	l := newLimiter(t, byHeader, []store.Limit{store.PerMinute(1)}, core.WithRefusal(func(_ *http.Request, d core.Decision) core.Response {
		body := `{"message":"too many","outcome":"` + d.Outcome.String() + `"}`
		return core.Response{Status: d.Response().Status, ContentType: "application/json", Body: []byte(body)}
	}))
	router.GET("/", ginlimit.New(l), func(c *gin.Context) { handled++ })
	get(router, "/", "a", nil)
	w := get(router, "/", "a", nil)
	if w.Code != 429 || w.Body.String() != `{"message":"too many","outcome":"denied"}` || w.Header().Get("Retry-After") != "60" || handled != 1 {
		t.Fatalf("custom refusal: %d %q %v, handler ran %d times", w.Code, w.Body.String(), w.Header(), handled)
	}
}

func TestNilLimiterPanicsAtConstruction(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("New(nil) did not panic")
		}
	}()
	ginlimit.New(nil)
}
