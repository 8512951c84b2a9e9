package core_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/keyfuncs"
	"github.com/sluicehq/sluice/nethttp"
)

func byXClient(r *http.Request) (string, error) { return r.Header.Get("X-Client"), nil }

func xClient(client string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.Header.Set("X-Client", client)
	return r
}

// A Limiter's name is required: New refuses an empty or unprintable one,
// so that no two Limiters share a namespace by leaving it out.
func TestNewRequiresAName(t *testing.T) {
	s := memorystore.New()
	limits := []store.Limit{store.PerHour(1)}
	for _, name := range []string{"", "a\nb", "café", strings.Repeat("a", 129)} {
		if _, err := core.New(s, name, byXClient, limits); !errors.Is(err, core.ErrInvalidOption) || !strings.Contains(err.Error(), "name") {
			t.Errorf("New with name %q: %v, want ErrInvalidOption naming the name", name, err)
		}
	}
}

// Two Limiters of one name on one store share the state: that is how
// several instances (or routers) enforce one limit together. Another name
// on the same store has its own.
func TestOneNameSharesState(t *testing.T) {
	s := memorystore.New()
	limits := []store.Limit{store.PerHour(1)}
	a, err := core.New(s, "api", byXClient, limits)
	if err != nil {
		t.Fatal(err)
	}
	b, err := core.New(s, "api", byXClient, limits)
	if err != nil {
		t.Fatalf("second Limiter named api: %v", err)
	}
	other, err := core.New(s, "other", byXClient, limits)
	if err != nil {
		t.Fatal(err)
	}
	if d := a.Decide(xClient("x")); d.Action != core.Serve {
		t.Fatalf("first request: %v", d.Outcome)
	}
	if d := b.Decide(xClient("x")); d.Action != core.Refuse {
		t.Errorf("second request through the other Limiter: %v, want refused (shared state)", d.Outcome)
	}
	if d := other.Decide(xClient("x")); d.Action != core.Serve {
		t.Errorf("a Limiter of another name: %v, want served (its own state)", d.Outcome)
	}
}

// captureDefault makes slog.Default() record into a slogCapture for the
// test.
func captureDefault(t *testing.T) *slogCapture {
	h := &slogCapture{level: slog.LevelDebug}
	old := slog.Default()
	slog.SetDefault(slog.New(h))
	t.Cleanup(func() { slog.SetDefault(old) })
	return h
}

// A Limiter logs its first key error, once, with the error and the rule in
// force; an empty route key (the middleware outside the mux) says so.
func TestFirstKeyErrorIsLogged(t *testing.T) {
	h := captureDefault(t)
	l, err := core.New(memorystore.New(), "api", byXClient, []store.Limit{store.PerHour(1)})
	if err != nil {
		t.Fatal(err)
	}
	l.Decide(xClient("a"))
	if recs := h.take(); len(recs) != 0 {
		t.Fatalf("records before any key error: %v", recs)
	}
	for i := 0; i < 3; i++ {
		l.Decide(xClient(""))
	}
	recs := h.take()
	if len(recs) != 1 {
		t.Fatalf("%d records for three key errors, want 1: %v", len(recs), recs)
	}
	r := recs[0]
	if r.level != slog.LevelWarn || r.attrs["limiter"] != "api" || r.attrs["key_error_rule"] != "per_address" ||
		!strings.Contains(r.attrs["error"], "empty key") || !strings.Contains(r.attrs["effect"], "per client address") {
		t.Errorf("record %+v: want a warning naming the Limiter, the error and the rule", r)
	}

	// A route key outside the mux, which never sees a route, refuses
	// loudly (500, an Error record) instead of keying per address,
	// whatever the key-error rule.
	route, err := core.New(memorystore.New(), "routes", keyfuncs.Route(), []store.Limit{store.PerHour(1)})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /users/{id}", func(http.ResponseWriter, *http.Request) {})
	wrapped := nethttp.Middleware(route)(mux) // the middleware outside the mux
	for range 2 {
		rec := httptest.NewRecorder()
		wrapped.ServeHTTP(rec, httptest.NewRequestWithContext(context.Background(), http.MethodGet, "/users/1", nil))
		if rec.Code != http.StatusInternalServerError || strings.Contains(rec.Body.String(), "route") {
			t.Errorf("route key outside the mux: %d %q, want 500 without the error's text", rec.Code, rec.Body)
		}
	}
	recs = h.take()
	if len(recs) != 1 || recs[0].level != slog.LevelError || !strings.Contains(recs[0].attrs["error"], "wraps the router instead of the routes") {
		t.Errorf("route key records %v, want one Error saying the middleware wraps the router", recs)
	}
	// Inside the mux it keys by route.
	inside := http.NewServeMux()
	inside.Handle("GET /users/{id}", nethttp.Middleware(route)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
	rec := httptest.NewRecorder()
	inside.ServeHTTP(rec, httptest.NewRequestWithContext(context.Background(), http.MethodGet, "/users/1", nil))
	if rec.Code != http.StatusOK {
		t.Errorf("route key inside the mux: %d, want 200", rec.Code)
	}
}

// slogCapture is a slog.Handler that keeps the records at or above level.
type slogCapture struct {
	level slog.Level
	mu    sync.Mutex
	recs  []slogRecord
}

type slogRecord struct {
	level slog.Level
	msg   string
	attrs map[string]string
}

func (h *slogCapture) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level }

func (h *slogCapture) Handle(_ context.Context, r slog.Record) error {
	rec := slogRecord{level: r.Level, msg: r.Message, attrs: map[string]string{}}
	r.Attrs(func(a slog.Attr) bool {
		rec.attrs[a.Key] = a.Value.String()
		return true
	})
	h.mu.Lock()
	h.recs = append(h.recs, rec)
	h.mu.Unlock()
	return nil
}

func (h *slogCapture) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *slogCapture) WithGroup(string) slog.Handler      { return h }

func (h *slogCapture) take() []slogRecord {
	h.mu.Lock()
	defer h.mu.Unlock()
	recs := h.recs
	h.recs = nil
	return recs
}
