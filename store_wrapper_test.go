package sluice_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/core/storetest"
	"github.com/sluicehq/sluice/internal/redistest"
)

// passThrough wraps a store as a user's tracing or test wrapper would, by
// embedding it, and counts the calls that pass through it: every method of
// the contract reaches the wrapped store, so nothing is lost by wrapping.
type passThrough struct {
	store.Store
	mu    sync.Mutex
	calls map[string]int
}

func wrap(s store.Store) *passThrough { return &passThrough{Store: s, calls: map[string]int{}} }

func (p *passThrough) count(method string) {
	p.mu.Lock()
	p.calls[method]++
	p.mu.Unlock()
}

func (p *passThrough) Take(ctx context.Context, key string, n int64, limits ...store.Spec) (store.Result, error) {
	p.count("Take")
	return p.Store.Take(ctx, key, n, limits...)
}

func (p *passThrough) Called(method string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls[method]
}

// wrapperClock is a fake clock that moves only when told to.
type wrapperClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *wrapperClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *wrapperClock) Advance(_ testing.TB, d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// Each store wrapped in a pass-through wrapper passes the conformance
// suite, and a Limiter on the wrapper keeps Status, Reset, WithCountIf and
// MaxInFlight.
func TestWrappedStores(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		clock := &wrapperClock{now: time.Unix(1_700_000_000, 123_457_000)}
		mem := memorystore.New(memorystore.WithClock(clock.Now))
		storetest.Run(t, storetest.Harness{
			NewStore: func(testing.TB) store.Store { return wrap(mem) },
			Now:      clock.Now,
			Advance:  clock.Advance,
		})
		checkLimiterThroughWrapper(t, wrap(memorystore.New()))
	})
	t.Run("miniredis", func(t *testing.T) {
		m := miniredis.RunT(t)
		checkLimiterThroughWrapper(t, wrap(newRedisStore(t, redisClient(t, m.Addr()), redisstore.WithTimeout(liveTimeout))))
	})
	t.Run("redis", func(t *testing.T) {
		srv := redistest.Shared(t)
		rdb := redisClient(t, srv.Addr)
		prefix := "wrapped:" + t.Name() + ":"
		storetest.Run(t, storetest.Harness{
			NewStore: func(tb testing.TB) store.Store {
				return wrap(newRedisStore(t, redisClient(t, srv.Addr), redisstore.WithPrefix(prefix),
					redisstore.WithTimeout(liveTimeout)))
			},
		})
		checkLimiterThroughWrapper(t, wrap(newRedisStore(t, rdb, redisstore.WithPrefix(prefix+"l:"),
			redisstore.WithTimeout(liveTimeout))))
	})
}

// checkLimiterThroughWrapper drives a Limiter on w: Status, Reset,
// WithCountIf's give-back and MaxInFlight's release all reach the store.
func checkLimiterThroughWrapper(t *testing.T, w *passThrough) {
	t.Helper()
	ctx := context.Background()
	key := func(r *http.Request) (string, error) { return r.Header.Get("X-Client"), nil }
	req := func(client string) *http.Request {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.Header.Set("X-Client", client)
		return r
	}
	limits := []store.Limit{{Algorithm: store.FixedWindow, Rate: 2, Period: time.Hour}}

	// Status and Reset.
	l, err := core.New(w, "wrapped", key, limits)
	if err != nil {
		t.Fatal(err)
	}
	l.Decide(req("a"))
	if st, err := l.Status(req("a")); err != nil || st.Remaining != 1 {
		t.Fatalf("Status through the wrapper: %+v, %v; want 1 remaining", st, err)
	}
	l.Decide(req("a"))
	if d := l.Decide(req("a")); d.Action != core.Refuse {
		t.Fatalf("third request: %v, want refused", d.Outcome)
	}
	if err := l.Reset(ctx, "a"); err != nil {
		t.Fatalf("Reset through the wrapper: %v", err)
	}
	if st, err := l.Status(req("a")); err != nil || st.Remaining != 2 {
		t.Fatalf("Status after Reset: %+v, %v; want 2 remaining", st, err)
	}
	if w.Called("Take") == 0 {
		t.Fatal("the Limiter's Takes did not pass through the wrapper")
	}

	// WithCountIf: a request not counted is given back.
	counted, err := core.New(w, "wrapped-countif", key, limits,
		core.WithCountIf(func(status int) bool { return status >= 400 }))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		d := counted.Decide(req("b"))
		if d.Action != core.Serve || !d.NeedsDone() {
			t.Fatalf("count-if request %d: %v, NeedsDone %v; want served, given back after", i, d.Outcome, d.NeedsDone())
		}
		d.Done(http.StatusOK)
	}
	if st, err := counted.Status(req("b")); err != nil || st.Remaining != 2 {
		t.Fatalf("after three uncounted requests: %+v, %v; want 2 remaining", st, err)
	}

	// MaxInFlight: Done releases the slot.
	inflight, err := core.New(w, "wrapped-inflight", key, []store.Limit{store.MaxInFlight(1, time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	first := inflight.Decide(req("c"))
	if first.Action != core.Serve || inflight.Decide(req("c")).Action != core.Refuse {
		t.Fatal("MaxInFlight(1) through the wrapper: want the first served, the second refused")
	}
	first.Done(http.StatusOK)
	if d := inflight.Decide(req("c")); d.Action != core.Serve {
		t.Fatalf("after Done: %v, want served (the slot released)", d.Outcome)
	}
}
