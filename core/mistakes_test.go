package core_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/keyfuncs"
)

func byXClient(r *http.Request) (string, error) { return r.Header.Get("X-Client"), nil }

func xClient(client string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.Header.Set("X-Client", client)
	return r
}

// A second live Limiter with the name of another on the same store is a
// mistake New reports, naming the name; unnamed ones too. Other names and
// other stores are fine.
func TestNewRefusesADuplicateName(t *testing.T) {
	s := memorystore.New()
	limits := []core.Limit{core.PerHour(1)}
	a, err := core.New(s, byXClient, limits, core.WithName("api"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = core.New(s, byXClient, limits, core.WithName("api"))
	if !errors.Is(err, core.ErrInvalidOption) || !strings.Contains(err.Error(), `named "api"`) || !strings.Contains(err.Error(), "WithSharedState") {
		t.Errorf("second Limiter named api: %v, want an error naming it and WithSharedState", err)
	}
	if _, err := core.New(s, byXClient, limits, core.WithName("api"), core.WithSharedState()); err == nil {
		t.Error("WithSharedState on the second only: no error, want one (the first did not ask)")
	}
	u, err := core.New(s, byXClient, limits)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := core.New(s, byXClient, []core.Limit{core.PerMinute(5)}); !errors.Is(err, core.ErrInvalidOption) || !strings.Contains(err.Error(), "unnamed") {
		t.Errorf("second unnamed Limiter: %v, want an error", err)
	}
	if _, err := core.New(s, byXClient, limits, core.WithName("other")); err != nil {
		t.Errorf("another name: %v", err)
	}
	if _, err := core.New(memorystore.New(), byXClient, limits, core.WithName("api")); err != nil {
		t.Errorf("another store: %v", err)
	}
	runtime.KeepAlive(a)
	runtime.KeepAlive(u)
}

// With WithSharedState on both, two Limiters of one name share the state.
func TestWithSharedState(t *testing.T) {
	s := memorystore.New()
	limits := []core.Limit{core.PerHour(1)}
	a, err := core.New(s, byXClient, limits, core.WithName("api"), core.WithSharedState())
	if err != nil {
		t.Fatal(err)
	}
	b, err := core.New(s, byXClient, limits, core.WithName("api"), core.WithSharedState())
	if err != nil {
		t.Fatalf("second Limiter with WithSharedState: %v", err)
	}
	if d := a.Decide(xClient("x")); d.Action != core.Serve {
		t.Fatalf("first request: %v", d.Outcome)
	}
	if d := b.Decide(xClient("x")); d.Action != core.Refuse {
		t.Errorf("second request through the other Limiter: %v, want refused (shared state)", d.Outcome)
	}
}

// notifying is a memory store that keeps reset hooks, as a Redis store
// does: a hook must not keep its Limiter alive.
type notifying struct {
	*memorystore.Store
	hooks []func(string)
}

func (s *notifying) OnReset(f func(string)) func() {
	s.hooks = append(s.hooks, f)
	return func() {}
}

// A Limiter that is garbage-collected frees its name on its store.
func TestCollectedLimiterFreesItsName(t *testing.T) {
	mem := memorystore.New()
	ns := &notifying{Store: memorystore.New()}
	for _, c := range []struct {
		name string
		opts []core.Option
		make func(opts ...core.Option) (*core.Limiter, error)
	}{
		{"memory", nil, func(opts ...core.Option) (*core.Limiter, error) {
			return core.New(mem, byXClient, []core.Limit{core.PerHour(1)}, opts...)
		}},
		{"reset hooks", []core.Option{core.WithFallbackStore(memorystore.New())}, func(opts ...core.Option) (*core.Limiter, error) {
			return core.New(ns, byXClient, []core.Limit{core.PerHour(1)}, opts...)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			func() {
				l, err := c.make(append(c.opts, core.WithName("gc"))...)
				if err != nil {
					t.Fatal(err)
				}
				l.Decide(xClient("x"))
			}()
			deadline := time.Now().Add(10 * time.Second)
			for {
				runtime.GC()
				l, err := c.make(append(c.opts, core.WithName("gc"))...)
				if err == nil {
					runtime.KeepAlive(l)
					return
				}
				if time.Now().After(deadline) {
					t.Fatalf("the name is still taken 10s after its Limiter was dropped: %v", err)
				}
				time.Sleep(time.Millisecond)
			}
		})
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
	l, err := core.New(memorystore.New(), byXClient, []core.Limit{core.PerHour(1)}, core.WithName("api"))
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

	route, err := core.New(memorystore.New(), keyfuncs.Route(), []core.Limit{core.PerHour(1)},
		core.WithName("routes"), core.WithKeyErrorRule(core.KeyErrorDeny))
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /users/{id}", func(http.ResponseWriter, *http.Request) {})
	wrapped := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { // the middleware outside the mux
		route.Decide(r)
		mux.ServeHTTP(w, r)
	})
	wrapped.ServeHTTP(httptest.NewRecorder(), httptest.NewRequestWithContext(context.Background(), http.MethodGet, "/users/1", nil))
	recs = h.take()
	if len(recs) != 1 || !strings.Contains(recs[0].attrs["error"], "route key empty: is the middleware inside the mux?") ||
		recs[0].attrs["key_error_rule"] != "deny" {
		t.Errorf("route key records %v, want one saying the route key is empty and asking about the mux", recs)
	}
}
