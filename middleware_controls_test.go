package sluice_test

// The Limiter's controls through the adapters, on the memory store,
// miniredis and a real redis-server (issue 19): a GET /rate_limit route
// answers what the last response's rate-limit headers said, for every
// algorithm (point 3); an operator's reset by what the client sends, whatever
// the key function's composition, and with Redis down (point 4); a key
// function that fails is logged once, with what to fix (point 5).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/keyfuncs"
	"github.com/sluicehq/sluice/nethttp"
)

// statusReply is what the /rate_limit route answers: the README's snippet.
type statusReply struct {
	Limit     int64 `json:"limit"`
	Remaining int64 `json:"remaining"`
	Reset     int64 `json:"reset"`
	Allowed   bool  `json:"allowed"`
}

// statusRoute is the README's /rate_limit handler, with the reset time by
// now (the Limiter's clock).
func statusRoute(t *testing.T, l *core.Limiter, now func() time.Time) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		res, err := l.Status(r)
		if err != nil {
			t.Errorf("Status: %v", err)
			http.Error(w, "no quota to show", http.StatusServiceUnavailable)
			return
		}
		_ = json.NewEncoder(w).Encode(statusReply{Limit: res.Limit, Remaining: res.Remaining,
			Reset: res.ResetAt(now()).Unix(), Allowed: res.Allowed})
	})
}

// statusLimits are one limit per algorithm, slow enough that nothing
// refills during a test on the real clock. LeakyBucket holds its second and
// third requests; the client leaves as soon as they are held (see
// runStatus), so that their charge stands without waiting.
func statusLimits() []store.Limit {
	var out []store.Limit
	for _, a := range []store.Algorithm{store.GCRA, store.TokenBucket, store.FixedWindow, store.SlidingWindow, store.SlidingLog, store.LeakyBucket} {
		l := store.Limit{Algorithm: a, Rate: 3, Period: time.Hour}
		if a == store.LeakyBucket {
			l.Burst = 2 // capacity 3
		}
		out = append(out, l)
	}
	return out
}

func TestMiddlewareStatus(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind.name, func(t *testing.T) {
			newEnv := kind.prepare(t)
			for _, ad := range adapters {
				for _, lim := range statusLimits() {
					t.Run(ad.name+"/"+string(lim.Algorithm), func(t *testing.T) {
						t.Parallel()
						runStatus(t, newEnv(t), ad, lim)
					})
				}
			}
		})
	}
}

// runStatus sends five requests to /api, and asks /rate_limit before the
// first and after each: Limit and Remaining are the last response's
// headers, Reset its X-RateLimit-Reset (exactly on a fake clock, within a
// second on the real one, where the two are read at different instants),
// and Allowed says whether the next request passes.
func runStatus(t *testing.T, e *env, ad adapter, lim store.Limit) {
	s := &setup{t: t, e: e, store: e.live}
	l := s.limiter("api", mustIP(t), []store.Limit{lim})
	now := time.Now
	if e.fake() {
		now = e.clock.Now
	}
	mux := http.NewServeMux()
	mux.Handle("GET /rate_limit", statusRoute(t, l, now))
	mux.Handle("/", ad.build([]route{{path: "/api", l: l}}, &probe{}))

	do := func(path string) *httptest.ResponseRecorder {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		req := httptest.NewRequestWithContext(context.WithValue(ctx, leaveKey{}, cancel), http.MethodGet, "http://example.com"+path, nil)
		req.RemoteAddr = defaultRemote
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, req)
		return w
	}
	status := func(where string) statusReply {
		w := do("/rate_limit")
		var st statusReply
		if err := json.Unmarshal(w.Body.Bytes(), &st); w.Code != http.StatusOK || err != nil {
			t.Fatalf("%s: /rate_limit answered %d %q (%v)", where, w.Code, w.Body, err)
		}
		return st
	}

	st := status("before any request")
	if st.Limit != 3 || st.Remaining != 3 || !st.Allowed {
		t.Fatalf("before any request: %+v, want limit 3, 3 remaining, allowed", st)
	}
	for i := 1; i <= 5; i++ {
		w := do("/api")
		where := fmt.Sprintf("request %d (%d)", i, w.Code)
		if passed := w.Code != http.StatusTooManyRequests; passed != st.Allowed {
			t.Errorf("%s: status before it said allowed=%v", where, st.Allowed)
		}
		h := func(name string) int64 {
			v, err := strconv.ParseInt(w.Header().Get(name), 10, 64)
			if err != nil {
				t.Fatalf("%s: header %s %q: %v", where, name, w.Header().Get(name), err)
			}
			return v
		}
		limit, remaining, reset := h("X-Ratelimit-Limit"), h("X-Ratelimit-Remaining"), h("X-Ratelimit-Reset")
		st = status("after " + where)
		if st.Limit != limit || st.Remaining != remaining {
			t.Errorf("%s: /rate_limit says limit %d, remaining %d; the response said %d, %d", where, st.Limit, st.Remaining, limit, remaining)
		}
		if d := st.Reset - reset; d != 0 && (e.fake() || d < -1 || d > 1) {
			t.Errorf("%s: /rate_limit says reset %d; the response said %d", where, st.Reset, reset)
		}
	}
}

// TestMiddlewareReset: a client refused through each adapter is served
// again once the operator resets it by what it sends (its API key, its
// address), for keys composed with keyfuncs.Fallback and Join; Reset with
// the bare identifier matches nothing and says so. With Redis down, Reset
// returns Redis' error but clears the local fallback that refuses the
// client.
func TestMiddlewareReset(t *testing.T) {
	apiKey, err := keyfuncs.Header("X-API-Key")
	if err != nil {
		t.Fatal(err)
	}
	ip := mustIP(t)
	compositions := []struct {
		name  string
		key   core.KeyFunc
		apiKy string // the client's X-API-Key, if any
		admin func(r *http.Request)
		bare  string
	}{
		{"fallback api key", keyfuncs.Fallback(apiKey, ip), "free-key-1",
			func(r *http.Request) { r.Header.Set("X-API-Key", "free-key-1") }, "free-key-1"},
		{"join ip route", keyfuncs.Join(ip, keyfuncs.Route()), "",
			func(r *http.Request) { r.RemoteAddr, r.Pattern = "192.0.2.1:0", "GET /api" }, "192.0.2.1"},
	}
	for _, kind := range storeKinds {
		t.Run(kind.name, func(t *testing.T) {
			newEnv := kind.prepare(t)
			for _, ad := range adapters {
				for _, c := range compositions {
					for _, dead := range []bool{false, true} {
						name := ad.name + "/" + c.name
						if dead {
							name += "/dead redis"
						}
						t.Run(name, func(t *testing.T) {
							t.Parallel()
							e := newEnv(t)
							s := &setup{t: t, e: e, store: e.live, dead: dead}
							if dead {
								s.store = e.dead
							}
							// A name of its own: the dead store (and its shared
							// fallback's answers and debts) serves the kind's
							// parallel subtests, which use the same client keys.
							l := s.limiter("reset-"+ad.name+"-"+c.name, c.key, []store.Limit{store.PerHour(1)})
							h := ad.build([]route{{path: "/api", l: l}}, &probe{})
							do := func() int {
								req := httptest.NewRequest(http.MethodGet, "http://example.com/api", nil)
								req.RemoteAddr = defaultRemote
								if c.apiKy != "" {
									req.Header.Set("X-API-Key", c.apiKy)
								}
								w := httptest.NewRecorder()
								h.ServeHTTP(w, req)
								return w.Code
							}
							if a, b := do(), do(); a != http.StatusOK || b != http.StatusTooManyRequests {
								t.Fatalf("two requests: %d %d, want 200 429", a, b)
							}
							ctx := context.Background()
							if err := l.Reset(ctx, c.bare); !dead && !errors.Is(err, store.ErrNotFound) {
								t.Errorf("Reset(%q): %v, want ErrNotFound", c.bare, err)
							}
							admin, err := http.NewRequestWithContext(ctx, http.MethodGet, "/", nil)
							if err != nil {
								t.Fatal(err)
							}
							c.admin(admin)
							// The key as the key function resolves it from what
							// the client sends, whatever its composition.
							key, err := c.key(admin)
							if err != nil {
								t.Fatal(err)
							}
							err = l.Reset(ctx, key)
							if dead && (err == nil || errors.Is(err, store.ErrNotFound)) {
								t.Errorf("Reset of the resolved key with Redis down: %v, want Redis' error", err)
							}
							if !dead && err != nil {
								t.Errorf("Reset of the resolved key: %v", err)
							}
							if got := do(); got != http.StatusOK {
								t.Errorf("after the reset: %d, want 200", got)
							}
						})
					}
				}
			}
		})
	}
}

// keyErrLog records the records of slog.Default() that name a Limiter.
type keyErrLog struct {
	mu   sync.Mutex
	recs []string // "limiter|error|rule"
}

func (h *keyErrLog) Enabled(context.Context, slog.Level) bool { return true }
func (h *keyErrLog) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *keyErrLog) WithGroup(string) slog.Handler            { return h }
func (h *keyErrLog) Handle(_ context.Context, r slog.Record) error {
	var limiter, msg, rule string
	r.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "limiter":
			limiter = a.Value.String()
		case "error":
			msg = a.Value.String()
		case "key_error_rule":
			rule = a.Value.String()
		}
		return true
	})
	h.mu.Lock()
	h.recs = append(h.recs, limiter+"|"+msg+"|"+rule)
	h.mu.Unlock()
	return nil
}

// TestMiddlewareKeyErrorLogged: a Limiter whose key function fails logs it
// once, through any adapter: keyfuncs.Route with the net/http middleware
// around the whole ServeMux (r.Pattern never set) says that the middleware
// wraps the router (and refuses: see core's TestFirstKeyErrorIsLogged); a
// missing API key gives the error and the rule.
func TestMiddlewareKeyErrorLogged(t *testing.T) {
	h := &keyErrLog{}
	old := slog.Default()
	slog.SetDefault(slog.New(h))
	t.Cleanup(func() { slog.SetDefault(old) })
	apiKey, err := keyfuncs.Header("X-API-Key")
	if err != nil {
		t.Fatal(err)
	}
	check := func(name string, serve http.Handler, want string) {
		t.Helper()
		for i := 0; i < 3; i++ {
			req := httptest.NewRequest(http.MethodGet, "http://example.com/api", nil)
			req.RemoteAddr = defaultRemote
			serve.ServeHTTP(httptest.NewRecorder(), req)
		}
		var got []string
		h.mu.Lock()
		for _, r := range h.recs {
			if strings.HasPrefix(r, name+"|") {
				got = append(got, r)
			}
		}
		h.mu.Unlock()
		if len(got) != 1 || !strings.Contains(got[0], want) {
			t.Errorf("%s: records %q, want one containing %q", name, got, want)
		}
	}
	{ // The net/http middleware around the whole mux.
		s := &setup{t: t, e: &env{}, store: memorystore.New()}
		l := s.limiter("whole-mux", keyfuncs.Route(), []store.Limit{store.PerHour(10)})
		mux := http.NewServeMux()
		mux.HandleFunc("GET /api", func(http.ResponseWriter, *http.Request) {})
		check("whole-mux", nethttp.Middleware(l)(mux), "the middleware wraps the router instead of the routes")
	}
	for _, ad := range adapters {
		s := &setup{t: t, e: &env{}, store: memorystore.New()}
		name := "no-api-key-" + ad.name
		l := s.limiter(name, apiKey, []store.Limit{store.PerHour(10)})
		check(name, ad.build([]route{{path: "/api", l: l}}, &probe{}), "no X-Api-Key header: sluice: request has no key|per_address")
	}
}
