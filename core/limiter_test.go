package core

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/core/storetest"
	"github.com/sluicehq/sluice/internal/fallback"
	"github.com/sluicehq/sluice/internal/partial"
)

// fakeClock is a settable clock for the Limiter (and the memory store).
type fakeClock = storetest.Clock

var newFakeClock = storetest.NewClock

// scriptStore is a store.Store test double: it records every call and answers
// with take (or a fixed allowed Result when take is nil).
type scriptStore struct {
	partial.Store
	mu    sync.Mutex
	calls []storeCall
	take  func(ctx context.Context, key string, n int64) (store.Result, error)
}

type storeCall struct {
	key         string
	n           int64
	limits      []store.Spec
	hasDeadline bool
	timeout     time.Duration // until the deadline, when hasDeadline
}

func (s *scriptStore) Take(ctx context.Context, key string, n int64, limits ...store.Spec) (store.Result, error) {
	dl, ok := ctx.Deadline()
	c := storeCall{key: key, n: n, limits: append([]store.Spec(nil), limits...), hasDeadline: ok}
	if ok {
		c.timeout = time.Until(dl)
	}
	s.mu.Lock()
	s.calls = append(s.calls, c)
	take := s.take
	s.mu.Unlock()
	if take == nil {
		return store.Result{Allowed: true, Limit: 10, Remaining: 9, ResetAfter: time.Second}, nil
	}
	return take(ctx, key, n)
}

// Charge is Take (a double without stamps).
func (s *scriptStore) Charge(ctx context.Context, key string, n int64, limits ...store.Spec) (store.Result, error) {
	return s.Take(ctx, key, n, limits...)
}

func (s *scriptStore) Calls() []storeCall {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]storeCall(nil), s.calls...)
}

func (s *scriptStore) NumCalls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.calls)
}

var errStoreDown = errors.New("store down")

func failingTake(context.Context, string, int64) (store.Result, error) {
	return store.Result{}, errStoreDown
}

// keyFromHeader keys requests by the X-Client header; a missing header is
// a key error wrapping ErrNoKey.
func keyFromHeader(r *http.Request) (string, error) {
	if k := r.Header.Get("X-Client"); k != "" {
		return k, nil
	}
	return "", ErrNoKey
}

func request(client string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	if client != "" {
		r.Header.Set("X-Client", client)
	}
	return r
}

// recorder collects observed events.
type recorder struct {
	mu     sync.Mutex
	events []Event
}

func (rec *recorder) observe(ev Event) {
	rec.mu.Lock()
	rec.events = append(rec.events, ev)
	rec.mu.Unlock()
}

func (rec *recorder) last(t *testing.T) Event {
	t.Helper()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.events) == 0 {
		t.Fatal("no event observed")
	}
	return rec.events[len(rec.events)-1]
}

func mustNew(t *testing.T, st store.Store, limits []store.Limit, opts ...Option) *Limiter {
	t.Helper()
	l, err := New(st, "test", keyFromHeader, limits, opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return l
}

var perSecond10 = []store.Limit{store.PerSecond(10)}

func TestNewRejectsBadArguments(t *testing.T) {
	st := &scriptStore{}
	if _, err := New(nil, "test", keyFromHeader, perSecond10); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("nil store: err = %v, want ErrInvalidOption", err)
	}
	if _, err := New(st, "test", nil, perSecond10); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("nil key: err = %v, want ErrInvalidOption", err)
	}
	if _, err := New(st, "test", keyFromHeader, nil); !errors.Is(err, store.ErrInvalidLimit) {
		t.Errorf("no limits: err = %v, want store.ErrInvalidLimit", err)
	}
	_, err := New(st, "test", keyFromHeader, []store.Limit{store.PerSecond(1), {Rate: 0, Period: time.Second}})
	if !errors.Is(err, store.ErrInvalidLimit) || !strings.Contains(err.Error(), "limit 1") {
		t.Errorf("invalid limit: err = %v, want ErrInvalidLimit naming limit 1", err)
	}

	bad := map[string]Option{
		"empty name":       withName(""),
		"long name":        withName(strings.Repeat("a", maxNameLength+1)),
		"control in name":  withName("a\nb"),
		"non-ASCII name":   withName("café"),
		"nil cost func":    WithCost(nil),
		"nil skip":         WithSkip(nil),
		"unknown policy":   WithFailurePolicy(FailurePolicy(9)),
		"nil observer":     WithObserver(nil),
		"unknown headers":  WithHeaders(HeaderStyle(9)),
		"unknown key rule": WithKeyErrorRule(KeyErrorRule(9), nil),
		"nil clock":        WithClock(nil),
	}
	for name, opt := range bad {
		if _, err := New(st, "test", keyFromHeader, perSecond10, opt); !errors.Is(err, ErrInvalidOption) {
			t.Errorf("%s: err = %v, want ErrInvalidOption", name, err)
		}
	}
	if _, err := New(st, `a "quoted" \ name`, keyFromHeader, perSecond10); err != nil {
		t.Errorf("valid options rejected: %v", err)
	}
}

func TestNewCopiesLimits(t *testing.T) {
	limits := []store.Limit{store.PerSecond(10)}
	l := mustNew(t, &scriptStore{}, limits)
	limits[0].Rate = 1
	if got := l.Limits()[0].Rate; got != 10 {
		t.Fatalf("Limits()[0].Rate = %d after the caller's slice changed, want 10", got)
	}
}

func TestNameNamespacesStoreKeys(t *testing.T) {
	st := &scriptStore{}
	// Name and key split differently over the same characters must not
	// meet in the store.
	a := mustNew(t, st, perSecond10, withName("a:"))
	b := mustNew(t, st, perSecond10, withName("a"))
	other := mustNew(t, st, perSecond10) // named "test"
	a.Decide(request("b"))
	b.Decide(request(":b"))
	other.Decide(request("1:a::b"))
	calls := st.Calls()
	want := []string{"2:a::b", "1:a::b", "4:test:1:a::b"}
	for i, c := range calls {
		if c.key != want[i] {
			t.Errorf("call %d: store key %q, want %q", i, c.key, want[i])
		}
		if len(c.limits) != 1 || c.limits[0] != specs(store.PerSecond(10))[0] {
			t.Errorf("call %d: limits %v, want the limiter's", i, c.limits)
		}
	}
	seen := map[string]bool{}
	for _, c := range calls {
		if seen[c.key] {
			t.Errorf("store key %q used by two limiters", c.key)
		}
		seen[c.key] = true
	}
}

// Under KeyErrorPerAddress (the default) a request without a key is
// charged to its address's bucket, in a namespace of the Limiter's own: by
// the peer, by WithKeyErrorRule's function when given and it succeeds, and
// all requests without any address together.
func TestKeyErrorPerAddress(t *testing.T) {
	st := &scriptStore{}
	rec := &recorder{}
	l := mustNew(t, st, perSecond10, withName("api"), WithObserver(rec.observe))
	d := l.Decide(request(""))
	if d.Action != Serve || d.Outcome != OutcomeAllowed {
		t.Fatalf("decision = %v/%v, want serve/allowed", d.Action, d.Outcome)
	}
	ev := rec.last(t)
	if !errors.Is(ev.KeyErr, ErrNoKey) || ev.Key != "" {
		t.Errorf("event KeyErr = %v, Key = %q; want ErrNoKey and no key", ev.KeyErr, ev.Key)
	}
	// An empty key with no error is a key error too, in the same bucket.
	emptyKey := func(*http.Request) (string, error) { return "", nil }
	l2, err := New(st, "api", emptyKey, perSecond10, WithObserver(rec.observe))
	if err != nil {
		t.Fatal(err)
	}
	l2.Decide(request("x"))
	if ev := rec.last(t); !errors.Is(ev.KeyErr, ErrNoKey) {
		t.Errorf("empty key: KeyErr = %v, want ErrNoKey", ev.KeyErr)
	}
	at := func(remote string) *http.Request {
		r := request("")
		r.RemoteAddr = remote
		return r
	}
	l.Decide(at("[2001:db8:1:2ff::1]:443")) // IPv6 by /56
	l.Decide(at(""))                        // no address
	byHeader := func(r *http.Request) (string, error) {
		if v := r.Header.Get("X-Addr"); v != "" {
			return v, nil
		}
		return "", ErrNoKey
	}
	l3 := mustNew(t, st, perSecond10, withName("api"), WithKeyErrorRule(KeyErrorPerAddress, byHeader))
	r := at("10.0.0.1:80")
	r.Header.Set("X-Addr", "198.51.100.7")
	l3.Decide(r)
	l3.Decide(at("10.0.0.1:80")) // the address function fails: the peer
	var got []string
	for _, c := range st.Calls() {
		got = append(got, c.key)
	}
	want := []string{"3:api!p:192.0.2.1", "3:api!p:192.0.2.1", "3:api!p:2001:db8:1:200::/56", "3:api!", "3:api!a:198.51.100.7", "3:api!p:10.0.0.1"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("store keys %q, want %q", got, want)
	}
}

func TestKeyErrorDenyAndAllow(t *testing.T) {
	for _, tc := range []struct {
		rule   KeyErrorRule
		shadow bool
		action Action
		status int
	}{
		{KeyErrorDeny, false, Refuse, http.StatusForbidden},
		{KeyErrorDeny, true, Serve, 0},
		{KeyErrorAllow, false, Serve, 0},
	} {
		t.Run(fmt.Sprint(tc.rule, tc.shadow), func(t *testing.T) {
			st := &scriptStore{}
			rec := &recorder{}
			opts := []Option{WithKeyErrorRule(tc.rule, nil), WithObserver(rec.observe)}
			if tc.shadow {
				opts = append(opts, WithShadow())
			}
			l := mustNew(t, st, perSecond10, opts...)
			d := l.Decide(request(""))
			if d.Action != tc.action || d.Outcome != OutcomeKeyError {
				t.Fatalf("decision = %v/%v, want %v/key_error", d.Action, d.Outcome, tc.action)
			}
			if got := d.Response().Status; got != tc.status {
				t.Errorf("response status %d, want %d", got, tc.status)
			}
			if n := st.NumCalls(); n != 0 {
				t.Errorf("store called %d times, want 0", n)
			}
			h := http.Header{}
			d.setHeaders(h, nil)
			if len(h) != 0 {
				t.Errorf("headers %v set without a decision", h)
			}
			if ev := rec.last(t); ev.Outcome != OutcomeKeyError || !errors.Is(ev.KeyErr, ErrNoKey) || ev.Action != tc.action {
				t.Errorf("event %+v", ev)
			}
			// A request with a key is limited as usual.
			if d := l.Decide(request("k")); d.Outcome != OutcomeAllowed || st.NumCalls() != 1 {
				t.Errorf("keyed request: outcome %v, %d store calls", d.Outcome, st.NumCalls())
			}
		})
	}
}

func TestKeyErrorResponseBody(t *testing.T) {
	l := mustNew(t, &scriptStore{}, perSecond10, WithKeyErrorRule(KeyErrorDeny, nil))
	w := httptest.NewRecorder()
	l.Decide(request("")).WriteResponse(w)
	if w.Code != http.StatusForbidden || w.Header().Get("Content-Type") != "application/json" ||
		w.Body.String() != "{\"error\":\"forbidden\"}\n" {
		t.Fatalf("got %d %q %q", w.Code, w.Header().Get("Content-Type"), w.Body.String())
	}
}

func TestCost(t *testing.T) {
	st := &scriptStore{}
	rec := &recorder{}
	l := mustNew(t, st, perSecond10, withName("fixed"), WithCost(func(*http.Request) int64 { return 3 }), WithObserver(rec.observe))
	l.Decide(request("a"))
	lf := mustNew(t, st, perSecond10, withName("func"), WithObserver(rec.observe), WithCost(func(r *http.Request) int64 {
		switch r.Method {
		case http.MethodHead:
			return 0
		case http.MethodPost:
			return 5
		}
		return -1
	}))
	head := request("a")
	head.Method = http.MethodHead
	lf.Decide(head)
	post := request("a")
	post.Method = http.MethodPost
	lf.Decide(post)
	lf.Decide(request("a")) // negative: 1, reported
	var got []int64
	for _, c := range st.Calls() {
		got = append(got, c.n)
	}
	if want := []int64{3, 0, 5, 1}; len(got) != 4 || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] || got[3] != want[3] {
		t.Fatalf("costs charged %v, want %v", got, want)
	}
	ev := rec.last(t)
	if ev.Cost != 1 || !errors.Is(ev.Err, store.ErrNegativeCost) {
		t.Errorf("negative cost event: Cost %d Err %v, want 1 and ErrNegativeCost", ev.Cost, ev.Err)
	}
}

func TestSkip(t *testing.T) {
	st := &scriptStore{}
	rec := &recorder{}
	keyCalls := 0
	key := func(r *http.Request) (string, error) { keyCalls++; return "k", nil }
	l, err := New(st, "test", key, perSecond10, WithObserver(rec.observe), WithSkip(func(r *http.Request) bool {
		return r.URL.Path == "/healthz"
	}))
	if err != nil {
		t.Fatal(err)
	}
	d := l.Decide(httptest.NewRequest(http.MethodGet, "/healthz", nil))
	if d.Action != Serve || d.Outcome != OutcomeSkipped {
		t.Fatalf("decision %v/%v, want serve/skipped", d.Action, d.Outcome)
	}
	h := http.Header{}
	d.setHeaders(h, nil)
	if len(h) != 0 || st.NumCalls() != 0 || keyCalls != 0 {
		t.Fatalf("skipped request: headers %v, %d store calls, %d key calls; want none", h, st.NumCalls(), keyCalls)
	}
	if ev := rec.last(t); ev.Outcome != OutcomeSkipped {
		t.Errorf("event outcome %v", ev.Outcome)
	}
	l.Decide(httptest.NewRequest(http.MethodGet, "/api", nil))
	if st.NumCalls() != 1 || keyCalls != 1 {
		t.Fatalf("limited request: %d store calls, %d key calls; want 1 and 1", st.NumCalls(), keyCalls)
	}
}

func deniedResult(retry time.Duration) store.Result {
	return store.Result{Allowed: false, Limit: 10, Remaining: 0, RetryAfter: retry, ResetAfter: retry + 500*time.Millisecond}
}

func TestFailurePolicies(t *testing.T) {
	t.Run("open", func(t *testing.T) {
		rec := &recorder{}
		l := mustNew(t, &scriptStore{take: failingTake}, perSecond10, WithFailurePolicy(FailOpen), WithObserver(rec.observe))
		d := l.Decide(request("a"))
		if d.Action != Serve || d.Outcome != OutcomeFailedOpen || d.Response().Status != 0 {
			t.Fatalf("decision %v/%v", d.Action, d.Outcome)
		}
		h := http.Header{}
		d.setHeaders(h, nil)
		if len(h) != 0 {
			t.Errorf("headers %v without a decision", h)
		}
		if ev := rec.last(t); !errors.Is(ev.Err, errStoreDown) {
			t.Errorf("event Err %v, want the store's error", ev.Err)
		}
	})
	t.Run("closed", func(t *testing.T) {
		l := mustNew(t, &scriptStore{take: failingTake}, perSecond10, WithFailurePolicy(FailClosed))
		d := l.Decide(request("a"))
		if d.Action != Refuse || d.Outcome != OutcomeFailedClosed {
			t.Fatalf("decision %v/%v", d.Action, d.Outcome)
		}
		w := httptest.NewRecorder()
		d.setHeaders(w.Header(), nil)
		d.WriteResponse(w)
		if w.Code != http.StatusServiceUnavailable || w.Body.String() != "{\"error\":\"service unavailable\"}\n" ||
			w.Header().Get("Retry-After") != "" || w.Header().Get("X-Ratelimit-Limit") != "" {
			t.Fatalf("response %d %q headers %v", w.Code, w.Body.String(), w.Header())
		}
		if strings.Contains(w.Body.String(), errStoreDown.Error()) {
			t.Fatal("store error text reached the client")
		}
	})
	t.Run("local", func(t *testing.T) {
		fb := &scriptStore{take: func(context.Context, string, int64) (store.Result, error) {
			return deniedResult(1200 * time.Millisecond), nil
		}}
		rec := &recorder{}
		l := mustNew(t, withLocal(&scriptStore{take: failingTake}, fb), perSecond10, withName("r"), WithCost(func(*http.Request) int64 { return 2 }),
			WithObserver(rec.observe))
		d := l.Decide(request("a"))
		if d.Action != Refuse || d.Outcome != OutcomeFallback || d.Response().Status != http.StatusTooManyRequests {
			t.Fatalf("decision %v/%v/%d, want refuse/fallback/429", d.Action, d.Outcome, d.Response().Status)
		}
		h := http.Header{}
		d.setHeaders(h, nil)
		if h.Get("Retry-After") != "2" || h.Get("X-Ratelimit-Remaining") != "0" {
			t.Errorf("fallback denial headers %v", h)
		}
		calls := fb.Calls()
		if len(calls) != 1 || calls[0].key != "1:r:a" || calls[0].n != 2 || len(calls[0].limits) != 1 {
			t.Fatalf("fallback calls %+v, want one with the same key, cost and limits", calls)
		}
		if ev := rec.last(t); ev.Outcome != OutcomeFallback || !errors.Is(ev.Err, errStoreDown) || ev.Result.Allowed {
			t.Errorf("event %+v", ev)
		}
	})
	t.Run("local store fails too", func(t *testing.T) {
		l := mustNew(t, withLocal(&scriptStore{take: failingTake}, &scriptStore{take: failingTake}), perSecond10)
		if d := l.Decide(request("a")); d.Action != Serve || d.Outcome != OutcomeFailedOpen {
			t.Fatalf("decision %v/%v, want serve/failed_open", d.Action, d.Outcome)
		}
	})
}

// A store's deadline (the Redis store's timeout) reaches the Limiter as
// a failure after it; the Event's Latency counts the time spent in the
// store, the deadline included.
func TestStoreDeadline(t *testing.T) {
	block := func(ctx context.Context, _ string, _ int64) (store.Result, error) {
		<-ctx.Done()
		return store.Result{}, ctx.Err()
	}
	st := fallback.New(&scriptStore{take: block}, fallback.Config{Timeout: 30 * time.Millisecond})
	rec := &recorder{}
	l := mustNew(t, st, perSecond10, WithFailurePolicy(FailOpen), WithObserver(rec.observe))
	start := time.Now()
	d := l.Decide(request("a"))
	elapsed := time.Since(start)
	if d.Outcome != OutcomeFailedOpen {
		t.Fatalf("outcome %v, want failed_open", d.Outcome)
	}
	if elapsed < 30*time.Millisecond {
		t.Errorf("Decide took %v with a 30ms deadline", elapsed)
	}
	ev := rec.last(t)
	if !errors.Is(ev.Err, context.DeadlineExceeded) || ev.Latency < 30*time.Millisecond {
		t.Errorf("event Err %v Latency %v, want DeadlineExceeded after ≥30ms", ev.Err, ev.Latency)
	}
}

func TestDeniedAndDelayed(t *testing.T) {
	res := deniedResult(700 * time.Millisecond)
	st := &scriptStore{take: func(context.Context, string, int64) (store.Result, error) { return res, nil }}
	l := mustNew(t, st, perSecond10)
	d := l.Decide(request("a"))
	if d.Action != Refuse || d.Outcome != OutcomeDenied || d.Result.RetryAfter != res.RetryAfter || d.Result.Limit != res.Limit {
		t.Fatalf("denial: %v/%v %+v", d.Action, d.Outcome, d.Result)
	}
	w := httptest.NewRecorder()
	d.setHeaders(w.Header(), nil)
	d.WriteResponse(w)
	if w.Code != http.StatusTooManyRequests || w.Header().Get("Content-Type") != "application/json" ||
		w.Body.String() != "{\"error\":\"rate limit exceeded\"}\n" || w.Header().Get("Retry-After") != "1" {
		t.Fatalf("denial response %d %v %q", w.Code, w.Header(), w.Body.String())
	}

	res = store.Result{Allowed: true, Limit: 3, Remaining: 1, ResetAfter: time.Second, Delay: 250 * time.Millisecond}
	d = l.Decide(request("a"))
	if d.Action != Hold || d.Outcome != OutcomeDelayed || d.Delay != 250*time.Millisecond {
		t.Fatalf("delay: %v/%v %v", d.Action, d.Outcome, d.Delay)
	}
	if d.Response().Status != http.StatusServiceUnavailable {
		t.Errorf("a held request cut short answers %d, want 503", d.Response().Status)
	}
	h := http.Header{}
	d.setHeaders(h, nil)
	if h.Get("Retry-After") != "" || h.Get("X-Ratelimit-Remaining") != "1" {
		t.Errorf("held request headers %v", h)
	}
}

func TestShadow(t *testing.T) {
	res := deniedResult(2 * time.Second)
	st := &scriptStore{take: func(context.Context, string, int64) (store.Result, error) { return res, nil }}
	rec := &recorder{}
	l := mustNew(t, st, perSecond10, WithShadow(), WithObserver(rec.observe))
	d := l.Decide(request("a"))
	if d.Action != Serve || d.Outcome != OutcomeShadowDenied || d.Response().Status != 0 {
		t.Fatalf("shadow denial: %v/%v", d.Action, d.Outcome)
	}
	h := http.Header{}
	d.setHeaders(h, nil)
	if h.Get("X-Ratelimit-Remaining") != "0" || h.Get("X-Ratelimit-Limit") != "10" || h.Get("Retry-After") != "" {
		t.Errorf("shadow headers %v: want the figures and no Retry-After", h)
	}
	if ev := rec.last(t); !ev.Shadow || ev.Outcome != OutcomeShadowDenied || ev.Action != Serve {
		t.Errorf("event %+v", ev)
	}
	res = store.Result{Allowed: true, Limit: 3, Remaining: 1, Delay: time.Second}
	if d := l.Decide(request("a")); d.Action != Serve || d.Delay != 0 || d.Outcome != OutcomeAllowed {
		t.Errorf("shadow delay: %v/%v delay %v, want serve at once", d.Action, d.Outcome, d.Delay)
	}
	lc := mustNew(t, &scriptStore{take: failingTake}, perSecond10, WithShadow(), WithFailurePolicy(FailClosed))
	if d := lc.Decide(request("a")); d.Action != Serve || d.Outcome != OutcomeFailedClosed {
		t.Errorf("shadow fail-closed: %v/%v, want serve/failed_closed", d.Action, d.Outcome)
	}
}

func TestObserverEvent(t *testing.T) {
	var a, b []Event
	st := &scriptStore{}
	l := mustNew(t, st, perSecond10, withName("obs"), WithCost(func(*http.Request) int64 { return 4 }),
		WithObserver(func(ev Event) { a = append(a, ev) }),
		WithObserver(func(ev Event) { b = append(b, ev) }))
	r := request("client-1")
	l.Decide(r)
	if len(a) != 1 || len(b) != 1 {
		t.Fatalf("observers called %d and %d times, want once each", len(a), len(b))
	}
	ev := a[0]
	if ev.Limiter != "obs" || ev.Key != "client-1" || ev.Cost != 4 || ev.Request != r || ev.Outcome != OutcomeAllowed ||
		ev.Action != Serve || !ev.Result.Allowed || ev.Err != nil || ev.KeyErr != nil || ev.Latency <= 0 {
		t.Fatalf("event %+v", ev)
	}
}

func TestWait(t *testing.T) {
	d := Decision{Action: Hold, Delay: 40 * time.Millisecond}
	start := time.Now()
	if err := d.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el < 40*time.Millisecond {
		t.Errorf("Wait returned after %v, want ≥ 40ms", el)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(20 * time.Millisecond); cancel() }() // a cancel while it waits (or before: Canceled too)
	d.Delay = time.Hour
	start = time.Now()
	if err := d.Wait(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait = %v, want context.Canceled", err)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Errorf("cancelled Wait took %v", el)
	}
	if err := (Decision{Action: Serve, Delay: time.Hour}).Wait(ctx); err != nil {
		t.Errorf("Wait on Serve = %v, want nil at once", err)
	}
}

func TestStringers(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{Serve.String(), "serve"}, {Hold.String(), "hold"}, {Refuse.String(), "refuse"},
		{OutcomeShadowDenied.String(), "shadow_denied"}, {OutcomeKeyError.String(), "key_error"},
		{OutcomeFailedOpen.String(), "failed_open"}, {OutcomeFallback.String(), "fallback"},
	} {
		if tc.got != tc.want {
			t.Errorf("String() = %q, want %q", tc.got, tc.want)
		}
	}
}

func TestDecideConcurrent(t *testing.T) {
	var n atomic.Int64
	st := &scriptStore{take: func(context.Context, string, int64) (store.Result, error) {
		if n.Add(1)%3 == 0 {
			return store.Result{}, errStoreDown
		}
		// Room for every request: the fallback, which leaves room for the
		// Takes in flight, serves too.
		return store.Result{Allowed: true, Limit: 10_000, Remaining: 5_000, ResetAfter: time.Second}, nil
	}}
	l := mustNew(t, withLocal(st, &scriptStore{}), perSecond10, WithHeaders(HeadersLegacy|HeadersIETF))
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				d := l.Decide(request("a"))
				d.setHeaders(http.Header{}, nil)
				if d.Action != Serve {
					t.Errorf("action %v, want serve: every path here serves", d.Action)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// withLocal is st with a local fallback, as the Redis store has one.
func withLocal(st, local store.Store) store.Store {
	return fallback.New(st, fallback.Config{Local: local})
}

// withName renames the Limiter a test helper makes (New's name), so that
// helpers taking options need no name of their own.
func withName(name string) Option {
	return optionFunc(func(o *options) error {
		if err := checkName("name", name); err != nil {
			return err
		}
		o.l.name = name
		o.l.keyPrefix = strconv.Itoa(len(name)) + ":" + name + ":"
		o.l.keylessPrefix = strconv.Itoa(len(name)) + ":" + name + "!"
		return nil
	})
}
