package ginlimit_test

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/ginlimit"
	"github.com/sluicehq/sluice/keyfuncs"
)

// A method the router does not serve adds no route key (issue 29, item 4,
// checked in every adapter): gin leaves FullPath empty for 404 and 405,
// with or without HandleMethodNotAllowed, and for NoRoute handlers, so
// invented methods make no keys; served routes keep "METHOD /template".
func TestRouteKeysBoundedByMethods(t *testing.T) {
	for _, notAllowed := range []bool{false, true} {
		keys := map[string]int{}
		l, err := core.New(memorystore.New(), "routes", keyfuncs.Route(), []store.Limit{store.PerMinute(1_000_000)},
			core.WithObserver(func(ev core.Event) {
				if ev.Key != "" {
					keys[ev.Key]++
				}
			}))
		if err != nil {
			t.Fatal(err)
		}
		gin.SetMode(gin.ReleaseMode)
		r := gin.New()
		r.HandleMethodNotAllowed = notAllowed
		r.Use(ginlimit.New(l))
		ok := func(c *gin.Context) { c.Status(http.StatusOK) }
		r.GET("/users/:id", ok)
		r.Handle("PURGE", "/cache", ok)
		r.NoRoute(func(c *gin.Context) { c.Status(http.StatusNotFound) })
		serve := func(method, path string) int {
			w := httptest.NewRecorder()
			r.ServeHTTP(w, httptest.NewRequest(method, path, nil))
			return w.Code
		}
		for i := range 1000 {
			serve("M"+strconv.Itoa(i), "/users/1")
			serve("M"+strconv.Itoa(i), "/nowhere")
		}
		if len(keys) != 0 {
			t.Errorf("HandleMethodNotAllowed %v: invented methods made route keys %v", notAllowed, keys)
		}
		for _, c := range []struct{ method, path, key string }{
			{"GET", "/users/1", "GET /users/:id"}, {"PURGE", "/cache", "PURGE /cache"},
		} {
			if code := serve(c.method, c.path); code != http.StatusOK || keys[c.key] != 1 {
				t.Errorf("%s %s: %d, keys %v; want 200 and %q", c.method, c.path, code, keys, c.key)
			}
		}
	}
}
