package nethttp_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/nethttp"
)

var t0 = time.Unix(1_700_000_000, 0)

func byHeader(r *http.Request) (string, error) {
	if k := r.Header.Get("X-Client"); k != "" {
		return k, nil
	}
	return "", core.ErrNoKey
}

func newLimiter(t *testing.T, key core.KeyFunc, limits []core.Limit, opts ...core.Option) *core.Limiter {
	t.Helper()
	now := func() time.Time { return t0 }
	store := core.NewMemoryStore(core.WithClock(now))
	l, err := core.New(store, key, limits, append([]core.Option{core.WithClock(now)}, opts...)...)
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

func TestAllowThenDeny(t *testing.T) {
	next := &counting{}
	h := nethttp.Middleware(newLimiter(t, byHeader, []core.Limit{core.PerMinute(2)}))(next)
	// GCRA 2/min: T = 30s. Resets at t0+30s, t0+60s; the third waits 30s.
	for i, want := range []struct {
		code                         int
		remaining, reset, retryAfter string
	}{
		{200, "1", "1700000030", ""},
		{200, "0", "1700000060", ""},
		{429, "0", "1700000060", "30"},
	} {
		w := get(h, "a")
		if w.Code != want.code || w.Header().Get("X-RateLimit-Limit") != "2" ||
			w.Header().Get("X-RateLimit-Remaining") != want.remaining ||
			w.Header().Get("X-RateLimit-Reset") != want.reset ||
			w.Header().Get("Retry-After") != want.retryAfter {
			t.Fatalf("request %d: %d %v, want %+v", i+1, w.Code, w.Header(), want)
		}
	}
	if next.n.Load() != 2 {
		t.Fatalf("handler called %d times, want 2", next.n.Load())
	}
	w := get(h, "a")
	if w.Header().Get("Content-Type") != "application/json" || w.Body.String() != "{\"error\":\"rate limit exceeded\"}\n" {
		t.Fatalf("denial body %q type %q", w.Body.String(), w.Header().Get("Content-Type"))
	}
	if w := get(h, "b"); w.Code != 200 || w.Body.String() != "ok" {
		t.Fatalf("another client: %d %q", w.Code, w.Body.String())
	}
}

func TestFailClosedNeverLeaksErrors(t *testing.T) {
	down := storeFunc(func(context.Context, string, int64, ...core.Limit) (core.Result, error) {
		return core.Result{}, errors.New("dial tcp 10.0.0.7:6379: connection refused")
	})
	l, err := core.New(down, byHeader, []core.Limit{core.PerMinute(2)}, core.WithFailurePolicy(core.FailClosed))
	if err != nil {
		t.Fatal(err)
	}
	next := &counting{}
	w := get(nethttp.Middleware(l)(next), "a")
	if w.Code != 503 || next.n.Load() != 0 || strings.Contains(w.Body.String(), "10.0.0.7") || w.Body.String() != "{\"error\":\"service unavailable\"}\n" {
		t.Fatalf("fail closed: %d %q, handler called %d times", w.Code, w.Body.String(), next.n.Load())
	}
}

type storeFunc func(ctx context.Context, key string, n int64, limits ...core.Limit) (core.Result, error)

func (f storeFunc) Take(ctx context.Context, key string, n int64, limits ...core.Limit) (core.Result, error) {
	return f(ctx, key, n, limits...)
}

func TestSkipSetsNoHeaders(t *testing.T) {
	next := &counting{}
	l := newLimiter(t, byHeader, []core.Limit{core.PerMinute(1)}, core.WithSkip(func(r *http.Request) bool {
		return r.Header.Get("X-Internal") == "1"
	}))
	h := nethttp.Middleware(l)(next)
	for i := 0; i < 3; i++ {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.Header.Set("X-Client", "a")
		r.Header.Set("X-Internal", "1")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != 200 || w.Header().Get("X-RateLimit-Limit") != "" {
			t.Fatalf("skipped request %d: %d %v", i, w.Code, w.Header())
		}
	}
}

func TestRoutePatternKey(t *testing.T) {
	byRoute := func(r *http.Request) (string, error) {
		if r.Pattern == "" {
			return "", core.ErrNoKey
		}
		return r.Pattern, nil
	}
	l := newLimiter(t, byRoute, []core.Limit{core.PerMinute(1)}, core.OnKeyError(core.KeyErrorDeny))
	mux := http.NewServeMux()
	mux.Handle("GET /users/{id}", nethttp.Middleware(l)(&counting{}))
	codes := []int{}
	for _, path := range []string{"/users/1", "/users/2"} {
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, httptest.NewRequest(http.MethodGet, path, nil))
		codes = append(codes, w.Code)
	}
	if codes[0] != 200 || codes[1] != 429 {
		t.Fatalf("codes %v: /users/1 and /users/2 must share the route's limit", codes)
	}
}

func TestHold(t *testing.T) {
	// Real clock: LeakyBucket 20/s, no queue beyond 1: T = 50ms.
	st := core.NewMemoryStore()
	l, err := core.New(st, byHeader, []core.Limit{{Algorithm: core.LeakyBucket, Rate: 20, Period: time.Second, Burst: 1}})
	if err != nil {
		t.Fatal(err)
	}
	next := &counting{}
	h := nethttp.Middleware(l)(next)
	if w := get(h, "a"); w.Code != 200 {
		t.Fatalf("first: %d", w.Code)
	}
	start := time.Now()
	w := get(h, "a")
	if el := time.Since(start); w.Code != 200 || el < 40*time.Millisecond {
		t.Fatalf("second: %d after %v, want 200 after about 50ms", w.Code, el)
	}
	if next.n.Load() != 2 {
		t.Fatalf("handler called %d times", next.n.Load())
	}
}

func TestHoldAbortsWhenClientGoes(t *testing.T) {
	// T = 10s: the second request would be held 10s.
	l, err := core.New(core.NewMemoryStore(), byHeader, []core.Limit{{Algorithm: core.LeakyBucket, Rate: 1, Period: 10 * time.Second, Burst: 1}})
	if err != nil {
		t.Fatal(err)
	}
	next := &counting{}
	h := nethttp.Middleware(l)(next)
	get(h, "a")
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(30*time.Millisecond, cancel)
	r := httptest.NewRequest(http.MethodGet, "/", nil).WithContext(ctx)
	r.Header.Set("X-Client", "a")
	w := httptest.NewRecorder()
	start := time.Now()
	h.ServeHTTP(w, r)
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("held %v after the client went away", el)
	}
	if next.n.Load() != 1 || w.Code != 503 {
		t.Fatalf("handler called %d times, status %d; want 1 and 503", next.n.Load(), w.Code)
	}
}

func TestOnRefuse(t *testing.T) {
	l := newLimiter(t, byHeader, []core.Limit{core.PerMinute(1)})
	var got core.Decision
	h := nethttp.Middleware(l, nethttp.OnRefuse(func(w http.ResponseWriter, r *http.Request, d core.Decision) {
		got = d
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(d.Response().Status)
		_, _ = w.Write([]byte("<p>slow down</p>"))
	}))(&counting{})
	get(h, "a")
	w := get(h, "a")
	if w.Code != 429 || w.Body.String() != "<p>slow down</p>" || w.Header().Get("Retry-After") != "60" || got.Outcome != core.OutcomeDenied {
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
