package sluice_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/gin-gonic/gin"
	"github.com/labstack/echo/v4"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/echolimit"
	"github.com/sluicehq/sluice/ginlimit"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/nethttp"
)

// inFlightApps wrap a handler in each adapter, on the route "/export".
var inFlightApps = []struct {
	name  string
	build func(l *core.Limiter, h http.HandlerFunc) http.Handler
}{
	{"nethttp", func(l *core.Limiter, h http.HandlerFunc) http.Handler {
		return nethttp.Middleware(l)(h)
	}},
	{"gin", func(l *core.Limiter, h http.HandlerFunc) http.Handler {
		r := gin.New()
		r.GET("/export", ginlimit.New(l), func(c *gin.Context) { h(c.Writer, c.Request) })
		return r
	}},
	{"echo", func(l *core.Limiter, h http.HandlerFunc) http.Handler {
		e := echo.New()
		e.GET("/export", func(c echo.Context) error {
			h(c.Response(), c.Request())
			return nil
		}, echolimit.New(l))
		return e
	}},
}

// inFlightEnv is two instances of one service on one backend: each
// instance's own Store (its own client, for Redis), and the clock of the
// backend when the test controls it.
type inFlightEnv struct {
	stores  [2]store.Store
	advance func(time.Duration) // nil: real time
}

// inFlightKinds are the backends: the memory store (one store: two
// instances of a process share nothing else), a miniredis and a real
// redis-server, both with two clients and two Stores.
var inFlightKinds = []struct {
	name string
	env  func(t *testing.T) inFlightEnv
}{
	{"memory", func(t *testing.T) inFlightEnv {
		c := &fakeClock{now: t0}
		m := memorystore.New(memorystore.WithClock(c.Now))
		return inFlightEnv{stores: [2]store.Store{m, m}, advance: c.advance}
	}},
	{"miniredis", func(t *testing.T) inFlightEnv {
		m := miniredis.RunT(t)
		m.SetTime(t0)
		c := &fakeClock{now: t0, mini: m}
		return inFlightEnv{
			stores: [2]store.Store{newRedisStore(t, redisClient(t, m.Addr()), redisstore.WithTimeout(liveTimeout)),
				newRedisStore(t, redisClient(t, m.Addr()), redisstore.WithTimeout(liveTimeout))},
			advance: c.advance,
		}
	}},
	{"redis", func(t *testing.T) inFlightEnv {
		srv := redistest.Shared(t)
		prefix := fmt.Sprintf("inflight:%d:%d:", os.Getpid(), prefixSeq.Add(1))
		var e inFlightEnv
		for i := range e.stores {
			e.stores[i] = newRedisStore(t, redisClient(t, srv.Addr), redisstore.WithPrefix(prefix), redisstore.WithTimeout(liveTimeout))
		}
		return e
	}},
}

// inFlightLimiter is one instance's Limiter named name: every request is
// the client "c1". The instances of a test may share one store (the memory
// store), and then share its state.
func inFlightLimiter(t *testing.T, name string, s store.Store, limits ...store.Limit) *core.Limiter {
	t.Helper()
	key := func(*http.Request) (string, error) { return "c1", nil }
	l, err := core.New(s, name, key, limits)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// gauge counts the requests in a handler and the most ever at once.
type gauge struct{ cur, peak atomic.Int64 }

func (g *gauge) enter() {
	c := g.cur.Add(1)
	for p := g.peak.Load(); c > p && !g.peak.CompareAndSwap(p, c); p = g.peak.Load() {
	}
}

func (g *gauge) leave() { g.cur.Add(-1) }

func get(h http.Handler) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/export", nil))
	return w
}

// Issue 21, Done when 1: two instances, MaxInFlight(3, 10s), a handler
// that sleeps 200 ms. 20 concurrent requests of one client through both
// never have more than 3 in the handler at once (counted in the handler),
// exactly 3 are served (the handler also waits for the 17 refusals, so
// that none finishes before every request was decided) and the others get
// 429 with Limit 3, Remaining 0 and Retry-After 1; after they finish the
// next 3 are served at once; a handler that panics gives its slot back;
// slots of requests whose process vanished (decided, never done) are free
// again after the hold, not before.
func TestMiddlewareInFlight(t *testing.T) {
	for _, kind := range inFlightKinds {
		for _, app := range inFlightApps {
			t.Run(kind.name+"/"+app.name, func(t *testing.T) {
				t.Parallel()
				e := kind.env(t)
				var (
					g        gauge
					refusals atomic.Int64
					all      = make(chan struct{})
					once     sync.Once
				)
				handler := func(w http.ResponseWriter, r *http.Request) {
					g.enter()
					defer g.leave()
					if r.Header.Get("X-Panic") != "" {
						panic("handler panics")
					}
					time.Sleep(200 * time.Millisecond) // the handler's work, holding its slot
					select {
					case <-all:
					case <-time.After(5 * time.Second):
					}
					w.WriteHeader(http.StatusOK)
				}
				limit := store.MaxInFlight(3, 10*time.Second)
				var inst [2]http.Handler
				for i := range inst {
					inst[i] = app.build(inFlightLimiter(t, "export", e.stores[i], limit), handler)
				}
				codes := burst(t, inst, 20, func(w *httptest.ResponseRecorder) {
					if w.Code == http.StatusTooManyRequests {
						checkInFlightRefusal(t, w)
						if refusals.Add(1) == 17 {
							once.Do(func() { close(all) })
						}
					}
				})
				if p := g.peak.Load(); p > 3 {
					t.Errorf("%d requests in the handler at once, want at most 3", p)
				}
				if codes[http.StatusOK] != 3 || codes[http.StatusTooManyRequests] != 17 {
					t.Errorf("20 concurrent requests: %v, want 3 × 200 and 17 × 429", codes)
				}
				// All done: the next 3 pass at once.
				g.peak.Store(0)
				if codes := burst(t, inst, 3, nil); codes[http.StatusOK] != 3 {
					t.Errorf("3 requests after the first ones finished: %v, want 3 × 200", codes)
				}
				inFlightPanic(t, inst)
				inFlightVanished(t, e, app.build, handler)
			})
		}
	}
}

// burst sends n concurrent requests, alternating between the instances,
// calls each (when not nil) on every response, and counts the statuses.
func burst(t *testing.T, inst [2]http.Handler, n int, each func(*httptest.ResponseRecorder)) map[int]int {
	t.Helper()
	var (
		mu    sync.Mutex
		codes = map[int]int{}
		wg    sync.WaitGroup
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := get(inst[i%2])
			if each != nil {
				each(w)
			}
			mu.Lock()
			codes[w.Code]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	return codes
}

// checkInFlightRefusal checks the headers of a 429 of MaxInFlight(3, …).
func checkInFlightRefusal(t *testing.T, w *httptest.ResponseRecorder) {
	t.Helper()
	h := w.Header()
	if h.Get("X-Ratelimit-Limit") != "3" || h.Get("X-Ratelimit-Remaining") != "0" || h.Get("Retry-After") != "1" {
		t.Errorf("429 headers: Limit %q, Remaining %q, Retry-After %q; want 3, 0, 1",
			h.Get("X-Ratelimit-Limit"), h.Get("X-Ratelimit-Remaining"), h.Get("Retry-After"))
	}
}

// inFlightPanic: 3 handlers that panic give their 3 slots back; the next
// 3 requests are served.
func inFlightPanic(t *testing.T, inst [2]http.Handler) {
	t.Helper()
	for i := range 3 {
		func() {
			defer func() { _ = recover() }()
			r := httptest.NewRequest(http.MethodGet, "/export", nil)
			r.Header.Set("X-Panic", "1")
			w := httptest.NewRecorder()
			inst[i%2].ServeHTTP(w, r)
			t.Errorf("request %d: no panic reached the test (status %d)", i, w.Code)
		}()
	}
	if codes := burst(t, inst, 3, nil); codes[http.StatusOK] != 3 {
		t.Errorf("3 requests after 3 handlers panicked: %v, want 3 × 200", codes)
	}
}

// inFlightVanished: 3 requests decided and never done (their process
// killed mid-request) hold every slot until the hold has passed: a
// request is refused before, served after. On real time the hold is
// 600 ms, on a limit of its own.
func inFlightVanished(t *testing.T, e inFlightEnv, build func(*core.Limiter, http.HandlerFunc) http.Handler, handler http.HandlerFunc) {
	t.Helper()
	hold := 10 * time.Second
	if e.advance == nil {
		hold = 600 * time.Millisecond
	}
	gone := inFlightLimiter(t, "gone", e.stores[0], store.MaxInFlight(3, hold))
	start := time.Now()
	for i := range 3 {
		if d := gone.Decide(httptest.NewRequest(http.MethodGet, "/export", nil)); d.Action != core.Serve || !d.NeedsDone() {
			t.Fatalf("vanishing request %d: %v, NeedsDone %v; want served, holding a slot", i, d.Outcome, d.NeedsDone())
		}
	}
	h := build(inFlightLimiter(t, "gone", e.stores[1], store.MaxInFlight(3, hold)), handler)
	if e.advance != nil {
		e.advance(hold - time.Millisecond)
	}
	if w := get(h); w.Code != http.StatusTooManyRequests && time.Since(start) < hold {
		t.Errorf("a request while the vanished ones hold every slot: %d, want 429", w.Code)
	}
	if e.advance != nil {
		e.advance(time.Millisecond)
	} else {
		time.Sleep(time.Until(start.Add(hold + 50*time.Millisecond))) // the hold passes on Redis' real clock
	}
	if w := get(h); w.Code != http.StatusOK {
		t.Errorf("a request once the hold has passed: %d, want 200", w.Code)
	}
}

// Issue 21, Done when 2: MaxInFlight with a rate limit in one Limiter is
// atomic: requests refused by the in-flight limit charge no rate, and a
// request refused by the rate takes no slot.
func TestLimiterInFlightAtomic(t *testing.T) {
	for _, kind := range inFlightKinds {
		t.Run(kind.name, func(t *testing.T) {
			t.Parallel()
			e := kind.env(t)
			inflight := store.MaxInFlight(1, 10*time.Second)
			rate := store.Limit{Algorithm: store.TokenBucket, Rate: 2, Period: 24 * time.Hour}
			l := inFlightLimiter(t, "export", e.stores[0], inflight, rate)
			req := func() core.Decision { return l.Decide(httptest.NewRequest(http.MethodGet, "/export", nil)) }
			first := req()
			if first.Action != core.Serve {
				t.Fatalf("first request: %v", first.Outcome)
			}
			for i := range 5 {
				if d := req(); d.Action != core.Refuse || d.Result.Binding != 0 {
					t.Fatalf("request %d while the slot is taken: %v (binding %d), want refused by the in-flight limit", i+2, d.Outcome, d.Result.Binding)
				}
			}
			first.Done(http.StatusOK)
			second := req()
			if second.Action != core.Serve || second.Result.PerLimit[1].Remaining != 0 {
				t.Fatalf("request after the first is done: %v, rate remaining %d; want served, 0 left of 2 (the 5 refusals charged nothing)",
					second.Outcome, second.Result.PerLimit[1].Remaining)
			}
			second.Done(http.StatusOK)
			if d := req(); d.Action != core.Refuse || d.Result.Binding != 1 {
				t.Fatalf("third request: %v (binding %d), want refused by the rate", d.Outcome, d.Result.Binding)
			}
			// The refusal by the rate took no slot (nor does a refusal hold one
			// to give back): the in-flight limit alone, on the same state,
			// still has its one slot free.
			alone := inFlightLimiter(t, "export", e.stores[1], inflight)
			if d := alone.Decide(httptest.NewRequest(http.MethodGet, "/export", nil)); d.Action != core.Serve {
				t.Errorf("the in-flight limit after a refusal by the rate: %v, want served (its slot free)", d.Outcome)
			}
		})
	}
}

// A request held by a LeakyBucket limit whose wait is cut short (the
// client went away) is never served: each adapter gives its in-flight slot
// back at once.
func TestMiddlewareInFlightHoldCutShort(t *testing.T) {
	for _, app := range inFlightApps {
		t.Run(app.name, func(t *testing.T) {
			m := memorystore.New()
			inflight := store.MaxInFlight(1, time.Hour)
			leaky := store.Limit{Algorithm: store.LeakyBucket, Rate: 1, Period: time.Hour, Burst: 5}
			served := 0
			h := app.build(inFlightLimiter(t, "held", m, leaky, inflight), func(w http.ResponseWriter, r *http.Request) { served++ })
			if w := get(h); w.Code != http.StatusOK || served != 1 {
				t.Fatalf("first request: %d, served %d", w.Code, served)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/export", nil).WithContext(ctx))
			if w.Code != http.StatusServiceUnavailable || served != 1 {
				t.Fatalf("a held request whose client left: %d, served %d; want 503, not served", w.Code, served)
			}
			alone := inFlightLimiter(t, "held", m, inflight)
			if d := alone.Decide(httptest.NewRequest(http.MethodGet, "/export", nil)); d.Action != core.Serve {
				t.Errorf("the in-flight limit after the held request left: %v, want served (its slot given back)", d.Outcome)
			}
		})
	}
}
