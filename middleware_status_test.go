package sluice_test

// Status through the adapters: a GET /rate_limit route answers what the
// last response's rate-limit headers said, for every algorithm, on the
// memory store, miniredis and a real redis-server (issue 19, point 3).

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
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
func statusLimits() []core.Limit {
	var out []core.Limit
	for _, a := range []core.Algorithm{core.GCRA, core.TokenBucket, core.FixedWindow, core.SlidingWindow, core.SlidingLog, core.LeakyBucket} {
		l := core.Limit{Algorithm: a, Rate: 3, Period: time.Hour}
		if a == core.LeakyBucket {
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
func runStatus(t *testing.T, e *env, ad adapter, lim core.Limit) {
	s := &setup{t: t, e: e, store: e.live}
	l := s.limiter("api", mustIP(t), []core.Limit{lim})
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
		limit, remaining, reset := h(core.HeaderLimit), h(core.HeaderRemaining), h(core.HeaderReset)
		st = status("after " + where)
		if st.Limit != limit || st.Remaining != remaining {
			t.Errorf("%s: /rate_limit says limit %d, remaining %d; the response said %d, %d", where, st.Limit, st.Remaining, limit, remaining)
		}
		if d := st.Reset - reset; d != 0 && (e.fake() || d < -1 || d > 1) {
			t.Errorf("%s: /rate_limit says reset %d; the response said %d", where, st.Reset, reset)
		}
	}
}
