package nethttp_test

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/keyfuncs"
	"github.com/sluicehq/sluice/nethttp"
)

// A method the router does not serve adds no route key (issue 29, item 4,
// checked in every adapter): ServeMux answers 405 before a route's
// middleware runs, a pattern without a method is one key whatever the
// method, and middleware around the mux sees no pattern.
func TestRouteKeysBoundedByMethods(t *testing.T) {
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
	mw := nethttp.Middleware(l)
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})
	mux := http.NewServeMux()
	mux.Handle("GET /users/{id}", mw(ok))
	mux.Handle("/any", mw(ok))
	outer := mw(mux)
	for i := range 1000 {
		m := "M" + strconv.Itoa(i)
		for _, path := range []string{"/users/1", "/any", "/nowhere"} {
			mux.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(m, path, nil))
			outer.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(m, path, nil))
		}
	}
	if len(keys) != 1 || keys["/any"] != 2000 {
		t.Errorf("invented methods made route keys %v, want only /any", keys)
	}
}
