package echolimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/echolimit"
)

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

// newEcho returns an Echo whose error handler counts its calls: a refusal
// must never reach it.
func newEcho(errorsHandled *int) *echo.Echo {
	e := echo.New()
	def := e.DefaultHTTPErrorHandler
	e.HTTPErrorHandler = func(err error, c echo.Context) {
		*errorsHandled++
		def(err, c)
	}
	return e
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

// A refusal is written once, by the middleware, never through echo's
// HTTPErrorHandler. (Its headers: middleware_test.go.)
func TestDenyWritesOnce(t *testing.T) {
	errorsHandled, handled := 0, 0
	e := newEcho(&errorsHandled)
	e.Use(echolimit.New(newLimiter(t, byHeader, []store.Limit{store.PerMinute(1)})))
	e.GET("/", func(c echo.Context) error { handled++; return c.String(http.StatusOK, "ok") })
	get(e, "/", "a", nil)
	w := get(e, "/", "a", nil)
	if w.Code != 429 || w.Body.String() != "{\"error\":\"rate limit exceeded\"}\n" || w.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("denial: %d %q type %q; the response must be written exactly once", w.Code, w.Body.String(), w.Header().Get("Content-Type"))
	}
	if handled != 1 || errorsHandled != 0 {
		t.Fatalf("handler ran %d times, error handler %d; want 1 and 0", handled, errorsHandled)
	}
}

func TestPathAsPattern(t *testing.T) {
	byRoute := func(r *http.Request) (string, error) {
		if r.Pattern == "" {
			return "", core.ErrNoKey
		}
		return r.Pattern, nil
	}
	errorsHandled := 0
	e := newEcho(&errorsHandled)
	var patterns []string
	g := e.Group("/api", echolimit.New(newLimiter(t, byRoute, []store.Limit{store.PerMinute(1)}, core.WithKeyErrorRule(core.KeyErrorDeny, nil))))
	g.GET("/users/:id", func(c echo.Context) error {
		patterns = append(patterns, c.Request().Pattern)
		return c.String(http.StatusOK, "ok")
	})
	var codes []int
	for _, path := range []string{"/api/users/1", "/api/users/2"} {
		codes = append(codes, get(e, path, "", nil).Code)
	}
	if codes[0] != 200 || codes[1] != 429 {
		t.Fatalf("codes %v: /api/users/1 and /api/users/2 must share the route's limit", codes)
	}
	if len(patterns) != 1 || patterns[0] != "GET /api/users/:id" {
		t.Fatalf("handler saw patterns %v, want [GET /api/users/:id]", patterns)
	}
}

func TestHoldAbortsWhenClientGoes(t *testing.T) {
	l, err := core.New(memorystore.New(), "test", byHeader, []store.Limit{{Algorithm: store.LeakyBucket, Rate: 1, Period: 10 * time.Second, Burst: 1}})
	if err != nil {
		t.Fatal(err)
	}
	errorsHandled, handled := 0, 0
	e := newEcho(&errorsHandled)
	e.GET("/", func(c echo.Context) error { handled++; return c.String(http.StatusOK, "ok") }, echolimit.New(l))
	get(e, "/", "a", nil)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(30*time.Millisecond, cancel)
	start := time.Now()
	w := get(e, "/", "a", ctx)
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("held %v after the client went away", el)
	}
	if handled != 1 || w.Code != 503 || errorsHandled != 0 {
		t.Fatalf("handler called %d times, status %d, error handler %d; want 1, 503, 0", handled, w.Code, errorsHandled)
	}
}

// A refusal set with core.WithRefusal is written once, after the
// headers, without echo's error handler.
func TestRefusal(t *testing.T) {
	errorsHandled, handled := 0, 0
	e := newEcho(&errorsHandled)
	l := newLimiter(t, byHeader, []store.Limit{store.PerMinute(1)}, core.WithRefusal(func(r *http.Request, d core.Decision) core.Response {
		return core.Response{Status: d.Response().Status, ContentType: "application/json", Body: []byte(`{"message":"too many"}` + "\n")}
	}))
	e.GET("/", func(c echo.Context) error { handled++; return nil }, echolimit.New(l))
	get(e, "/", "a", nil)
	w := get(e, "/", "a", nil)
	if w.Code != 429 || w.Body.String() != "{\"message\":\"too many\"}\n" || w.Header().Get("Retry-After") != "60" || handled != 1 || errorsHandled != 0 {
		t.Fatalf("custom refusal: %d %q %v, handler %d, error handler %d", w.Code, w.Body.String(), w.Header(), handled, errorsHandled)
	}
}

func TestNilLimiterPanicsAtConstruction(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("New(nil) did not panic")
		}
	}()
	echolimit.New(nil)
}

// Echo applies Use middleware on every request. Every request must reach
// its own route's handler, charged once, through many routes and behind a
// middleware that makes a new handler per request.
func TestWrappedHandlersReachTheirRoute(t *testing.T) {
	for _, withInner := range []bool{false, true} {
		testWrappedHandlers(t, withInner)
	}
}

func testWrappedHandlers(t *testing.T, withInner bool) {
	errorsHandled := 0
	e := newEcho(&errorsHandled)
	limits := []store.Limit{{Algorithm: store.FixedWindow, Rate: 1000, Period: time.Hour}}
	e.Use(echolimit.New(newLimiter(t, byHeader, limits)))
	// Registered after the limiter, so its per-request closure is the
	// limiter's next handler.
	var inner int
	if withInner {
		e.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
			return func(c echo.Context) error { inner++; return next(c) }
		})
	}
	const routes = 40
	for i := 0; i < routes; i++ {
		name := "r" + strconv.Itoa(i)
		e.GET("/"+name, func(c echo.Context) error { return c.String(http.StatusOK, name) })
	}
	for round := 0; round < 3; round++ {
		for i := 0; i < routes; i++ {
			name := "r" + strconv.Itoa(i)
			w := get(e, "/"+name, "a", nil)
			if w.Code != http.StatusOK || w.Body.String() != name {
				t.Fatalf("inner %v, round %d, GET /%s: %d %q", withInner, round, name, w.Code, w.Body.String())
			}
			if want := strconv.Itoa(1000 - (round*routes + i + 1)); w.Header().Get("X-RateLimit-Remaining") != want {
				t.Fatalf("inner %v, round %d, GET /%s: remaining %q, want %s (one charge per request)", withInner, round, name, w.Header().Get("X-RateLimit-Remaining"), want)
			}
		}
	}
	if withInner && inner != 3*routes {
		t.Fatalf("inner middleware ran %d times, want %d", inner, 3*routes)
	}
	if errorsHandled != 0 {
		t.Fatalf("error handler ran %d times", errorsHandled)
	}
}
