package nethttp_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/nethttp"
)

// With WithCountIf, the middleware learns the status however the handler
// writes it: none written is a 200 (given back), a panic is a 500
// (counted, and the panic goes on); http.ResponseController still reaches
// the server's ResponseWriter.
func TestCountIfStatus(t *testing.T) {
	l := newLimiter(t, byHeader, []store.Limit{{Algorithm: store.FixedWindow, Rate: 1, Period: time.Minute}},
		core.WithCountIf(func(s int) bool { return s >= 400 }))
	h := nethttp.Middleware(l)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Header.Get("X-Do") {
		case "panic":
			panic("handler failed")
		case "flush":
			if err := http.NewResponseController(w).Flush(); err != nil {
				t.Errorf("ResponseController.Flush through the middleware: %v", err)
			}
		}
	}))
	serve := func(do string) (code int, panicked bool) {
		defer func() { panicked = recover() != nil }()
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.Header.Set("X-Client", "a")
		r.Header.Set("X-Do", do)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if do == "flush" && !w.Flushed {
			t.Error("the recorder was not flushed")
		}
		return w.Code, false
	}
	for _, do := range []string{"nothing", "flush", "nothing"} {
		if code, _ := serve(do); code != http.StatusOK {
			t.Fatalf("%s: status %d, want 200 (a limit of 1, given back)", do, code)
		}
	}
	if _, panicked := serve("panic"); !panicked {
		t.Fatal("the handler's panic did not go on")
	}
	if code, _ := serve("nothing"); code != http.StatusTooManyRequests {
		t.Errorf("after a panic: status %d, want 429 (the panic counts as a 500)", code)
	}
}
