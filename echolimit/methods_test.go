package echolimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/echolimit"
	"github.com/sluicehq/sluice/keyfuncs"
)

// A method the router does not serve adds no route key (issue 29, item 4:
// with e.Use, 1,000 requests with invented methods M0…M999 stored 1,000
// keys, each a 405 that never reached a handler). Served routes keep
// "METHOD /template"; a method outside the standard ones, which echo also
// hands to RouteNotFound handlers, keys as the template alone.
func TestRouteKeysBoundedByMethods(t *testing.T) {
	st := &keyCounter{Store: memorystore.New(), keys: map[string]bool{}}
	var keys []string
	l, err := core.New(st, "routes", keyfuncs.Route(), []store.Limit{store.PerMinute(1_000_000)},
		core.WithObserver(func(ev core.Event) {
			if ev.Key != "" {
				keys = append(keys, ev.Key)
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	e := echo.New()
	e.Use(echolimit.New(l))
	ok := func(c echo.Context) error { return c.NoContent(http.StatusOK) }
	e.GET("/users/:id", ok)
	e.POST("/users/:id", ok)
	e.Add("PURGE", "/cache", ok)
	e.RouteNotFound("/files/*", func(c echo.Context) error { return c.NoContent(http.StatusNotFound) })
	serve := func(method, path string) int {
		w := httptest.NewRecorder()
		e.ServeHTTP(w, httptest.NewRequest(method, path, nil))
		return w.Code
	}
	for i := range 1000 {
		m := "M" + strconv.Itoa(i)
		serve(m, "/users/1")   // 405
		serve(m, "/nowhere")   // 404
		serve(m, "/files/a/b") // the RouteNotFound handler
	}
	distinct := map[string]bool{}
	for _, k := range keys {
		distinct[k] = true
	}
	if len(distinct) > 1 || len(st.keys) > 2 {
		t.Errorf("3,000 requests with invented methods made %d route keys (%d stored), want at most 1 (2)", len(distinct), len(st.keys))
	}
	keys = nil
	for _, r := range []struct {
		method, path string
		code         int
		key          string
	}{
		{"GET", "/users/1", 200, "GET /users/:id"},
		{"POST", "/users/2", 200, "POST /users/:id"},
		{"PURGE", "/cache", 200, "/cache"},
		{"GET", "/files/x", 404, "GET /files/*"},
		{"M1", "/files/x", 404, "/files/*"},
		{"DELETE", "/users/1", 405, ""},
		{"GET", "/nowhere", 404, ""},
	} {
		keys = nil
		if code := serve(r.method, r.path); code != r.code {
			t.Errorf("%s %s: %d, want %d", r.method, r.path, code, r.code)
		}
		if got := append(keys, "")[0]; got != r.key {
			t.Errorf("%s %s: key %q, want %q", r.method, r.path, got, r.key)
		}
	}
}

// keyCounter is a memory store that notes the keys it was asked to take.
type keyCounter struct {
	*memorystore.Store
	keys map[string]bool
}

func (s *keyCounter) Take(ctx context.Context, key string, n int64, limits ...store.Spec) (store.Result, error) {
	s.keys[key] = true
	return s.Store.Take(ctx, key, n, limits...)
}
