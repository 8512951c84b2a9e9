package nethttp_test

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/nethttp"
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

// counting is a handler that counts its calls and answers 200 "ok".
type counting struct{ n atomic.Int64 }

func (c *counting) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.n.Add(1)
	w.Header().Set("Content-Type", "text/plain")
	_, _ = w.Write([]byte("ok"))
}

func get(h http.Handler, client string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	if client != "" {
		r.Header.Set("X-Client", client)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// A refusal set with core.WithRefusal is written after the headers.
func TestRefusal(t *testing.T) {
	var got core.Decision
	l := newLimiter(t, byHeader, []store.Limit{store.PerMinute(1)}, core.WithRefusal(func(r *http.Request, d core.Decision) core.Response {
		got = d
		return core.Response{Status: d.Response().Status, ContentType: "text/html", Body: []byte("<p>slow down</p>")}
	}))
	h := nethttp.Middleware(l)(&counting{})
	get(h, "a")
	w := get(h, "a")
	if w.Code != 429 || w.Body.String() != "<p>slow down</p>" || w.Header().Get("Content-Type") != "text/html" ||
		w.Header().Get("Retry-After") != "60" || got.Outcome != core.OutcomeDenied {
		t.Fatalf("custom refusal %d %q %v outcome %v", w.Code, w.Body.String(), w.Header(), got.Outcome)
	}
}

func TestNilLimiterPanicsAtConstruction(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("Middleware(nil) did not panic")
		}
	}()
	nethttp.Middleware(nil)
}
