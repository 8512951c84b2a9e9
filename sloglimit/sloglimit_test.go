package sloglimit_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/internal/fallback"
	"github.com/sluicehq/sluice/internal/partial"
	"github.com/sluicehq/sluice/sloglimit"
)

// slogCapture is a slog.Handler that keeps the records it is given.
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

func slogClientKey(r *http.Request) (string, error) {
	if k := r.Header.Get("X-Client"); k != "" {
		return k, nil
	}
	return "", core.ErrNoKey
}

func slogRequest(client string) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/orders?id=7", nil)
	if client != "" {
		r.Header.Set("X-Client", client)
	}
	return r
}

var slogT0 = time.Unix(1_700_000_000, 0)

func slogStopped() time.Time { return slogT0 }

// slogLimiter returns a Limiter named "api" on a memory store with a
// stopped clock, logging to a capture at level Debug.
func slogLimiter(t *testing.T, st store.Store, limits []store.Limit, logOpts []sloglimit.Option, opts ...core.Option) (*core.Limiter, *slogCapture) {
	t.Helper()
	h := &slogCapture{level: slog.LevelDebug}
	if st == nil {
		st = memorystore.New(memorystore.WithClock(slogStopped))
	}
	opts = append([]core.Option{core.WithClock(slogStopped),
		core.WithObserver(sloglimit.New(slog.New(h), logOpts...))}, opts...)
	l, err := core.New(st, "api", slogClientKey, limits, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return l, h
}

// slogFailing always fails.
type slogFailing struct{ partial.Store }

var errSlogDown = errors.New("store down")

func (slogFailing) Take(context.Context, string, int64, ...store.Spec) (store.Result, error) {
	return store.Result{}, fmt.Errorf("take: %w", errSlogDown)
}

func wantRecord(t *testing.T, got slogRecord, level slog.Level, msg string, attrs map[string]string) {
	t.Helper()
	if got.level != level || got.msg != msg || !reflect.DeepEqual(got.attrs, attrs) {
		t.Errorf("record\n got %v %q %v\nwant %v %q %v", got.level, got.msg, got.attrs, level, msg, attrs)
	}
}

func TestLogDenialsDeniedAndKeyError(t *testing.T) {
	l, h := slogLimiter(t, nil, []store.Limit{store.PerSecond(1)}, nil, core.WithKeyErrorRule(core.KeyErrorDeny, nil))
	l.Decide(slogRequest("alice")) // allowed: not logged
	l.Decide(slogRequest("alice")) // denied
	l.Decide(slogRequest(""))      // no key
	recs := h.take()
	if len(recs) != 2 {
		t.Fatalf("%d records, want 2: %v", len(recs), recs)
	}
	wantRecord(t, recs[0], slog.LevelInfo, "sluice: rate limit exceeded", map[string]string{
		"limiter": "api", "outcome": "denied", "action": "refuse", "method": "POST", "path": "/orders",
		"cost": "1", "limit": "1", "remaining": "0", "retry_after": "1s",
	})
	wantRecord(t, recs[1], slog.LevelWarn, "sluice: key function failed", map[string]string{
		"limiter": "api", "outcome": "key_error", "action": "refuse", "method": "POST", "path": "/orders",
		"cost": "0", "key_error": core.ErrNoKey.Error(),
	})
}

func TestLogDenialsStoreFailures(t *testing.T) {
	one := []store.Limit{store.PerSecond(1)}
	for _, tc := range []struct {
		policy        core.FailurePolicy
		level         slog.Level
		msg, action   string
		outcome       string
		limit, remain string
	}{
		{core.FailClosed, slog.LevelError, "sluice: store unavailable, failing closed", "refuse", "failed_closed", "", ""},
		{core.FailOpen, slog.LevelWarn, "sluice: store unavailable, failing open", "serve", "failed_open", "", ""},
		{core.FailLocal, slog.LevelWarn, "sluice: store unavailable, local store decided", "serve", "fallback", "1", "0"},
	} {
		t.Run(policyName[tc.policy], func(t *testing.T) {
			// A store with a local fallback, as the Redis store.
			st := fallback.New(slogFailing{}, fallback.Config{Local: memorystore.New(memorystore.WithClock(slogStopped))})
			l, h := slogLimiter(t, st, one, []sloglimit.Option{sloglimit.WithRepeatInterval(0)},
				core.WithFailurePolicy(tc.policy))
			l.Decide(slogRequest("alice"))
			recs := h.take()
			if len(recs) != 1 {
				t.Fatalf("%d records, want 1: %v", len(recs), recs)
			}
			want := map[string]string{
				"limiter": "api", "outcome": tc.outcome, "action": tc.action, "method": "POST",
				"path": "/orders", "cost": "1", "err": "take: store down",
			}
			if tc.limit != "" {
				want["limit"], want["remaining"] = tc.limit, tc.remain
			}
			wantRecord(t, recs[0], tc.level, tc.msg, want)
		})
	}
}

// A decision made without calling the store because a circuit breaker is
// open is logged one level lower than the failures that opened it.
func TestLogDenialsBreakerOpenLevel(t *testing.T) {
	h := &slogCapture{level: slog.LevelDebug}
	observe := sloglimit.New(slog.New(h), sloglimit.WithRepeatInterval(0))
	open := fmt.Errorf("redis: %w", store.ErrBreakerOpen)
	observe(core.Event{Limiter: "x", Outcome: core.OutcomeFailedClosed, Err: errSlogDown})
	observe(core.Event{Limiter: "x", Outcome: core.OutcomeFailedClosed, Err: open})
	observe(core.Event{Limiter: "x", Outcome: core.OutcomeFallback, Err: open})
	var levels []slog.Level
	for _, r := range h.take() {
		levels = append(levels, r.level)
	}
	if want := []slog.Level{slog.LevelError, slog.LevelWarn, slog.LevelInfo}; !reflect.DeepEqual(levels, want) {
		t.Errorf("levels %v, want %v", levels, want)
	}
}

// slogClock is a fake clock for LogDenials' repeat interval.
type slogClock struct{ now time.Time }

func (c *slogClock) Now() time.Time          { return c.now }
func (c *slogClock) Advance(d time.Duration) { c.now = c.now.Add(d) }

// During a store outage and under a flood of requests without a key, the
// first record of each kind is written at once, then at most one per
// interval, counting the ones left out; so are the denials of each client
// key.
func TestLogDenialsRepeats(t *testing.T) {
	clock := &slogClock{now: slogT0}
	h := &slogCapture{level: slog.LevelDebug}
	observe := sloglimit.New(slog.New(h), sloglimit.WithClock(clock.Now))
	api, err := core.New(memorystore.New(memorystore.WithClock(slogStopped)),
		"api", slogClientKey,
		[]store.Limit{store.PerSecond(1)}, core.WithClock(slogStopped),
		core.WithKeyErrorRule(core.KeyErrorDeny, nil), core.WithObserver(observe))
	if err != nil {
		t.Fatal(err)
	}
	decide := func(n int, client string) {
		for i := 0; i < n; i++ {
			api.Decide(slogRequest(client))
		}
	}
	// What a Limiter under FailOpen reports while its store is down.
	fail := func(limiter string, n int) {
		for i := 0; i < n; i++ {
			observe(core.Event{Limiter: limiter, Outcome: core.OutcomeFailedOpen, Cost: 1,
				Err: fmt.Errorf("take: %w", errSlogDown)})
		}
	}
	summary := func(limiter, kind, n string) map[string]string {
		return map[string]string{"limiter": limiter, "kind": kind, "suppressed": n}
	}
	const summaryMsg = "sluice: similar records suppressed"

	fail("api", 5) // the first failure is written
	decide(3, "")  // the first key error too
	fail("web", 2) // another Limiter: its own first record
	recs := h.take()
	if len(recs) != 3 || recs[0].attrs["outcome"] != "failed_open" || recs[1].attrs["outcome"] != "key_error" ||
		recs[2].attrs["limiter"] != "web" || recs[0].attrs["suppressed"] != "" {
		t.Fatalf("first records: %v", recs)
	}
	clock.Advance(9 * time.Second)
	fail("api", 2)
	if recs := h.take(); len(recs) != 0 {
		t.Fatalf("within the interval: %v", recs)
	}
	// 10s after the first: the next failure is written with the count of
	// those left out (4 + 2), and the other kinds' counts are reported.
	clock.Advance(time.Second)
	fail("api", 1)
	recs = h.take()
	if len(recs) != 3 {
		t.Fatalf("after the interval: %d records: %v", len(recs), recs)
	}
	got := map[string]slogRecord{}
	for _, r := range recs {
		got[r.attrs["limiter"]+" "+r.attrs["kind"]+r.attrs["outcome"]] = r
	}
	wantRecord(t, got["api key_error"], slog.LevelWarn, summaryMsg, summary("api", "key_error", "2"))
	wantRecord(t, got["web store_error"], slog.LevelWarn, summaryMsg, summary("web", "store_error", "1"))
	if r := got["api failed_open"]; r.attrs["suppressed"] != "6" || r.attrs["err"] != "take: store down" {
		t.Errorf("failure after the interval: %v", r)
	}

	// The store comes back: the failures left out since are reported by
	// the first decision after the interval, logged or not.
	clock.Advance(time.Second)
	fail("api", 3)
	decide(1, "carol") // allowed, within the interval: nothing
	if recs := h.take(); len(recs) != 0 {
		t.Fatalf("within the interval: %v", recs)
	}
	clock.Advance(10 * time.Second)
	decide(1, "dave") // allowed
	recs = h.take()
	if len(recs) != 1 {
		t.Fatalf("after recovery: %v", recs)
	}
	wantRecord(t, recs[0], slog.LevelWarn, summaryMsg, summary("api", "store_error", "3"))

	// Denials: the first of each client key is written, the others
	// counted until the interval has passed.
	decide(4, "erin")  // allowed, then 3 denials: one record
	decide(3, "frank") // allowed, then 2 denials: one record
	recs = h.take()
	if len(recs) != 2 || recs[0].attrs["outcome"] != "denied" || recs[1].attrs["outcome"] != "denied" {
		t.Fatalf("denials of two clients: %v", recs)
	}
	clock.Advance(10 * time.Second)
	decide(1, "grace") // allowed: the counts are reported
	recs = h.take()
	if len(recs) != 2 {
		t.Fatalf("denials after the interval: %v", recs)
	}
	n := map[string]bool{}
	for _, r := range recs {
		if r.msg != summaryMsg || r.attrs["kind"] != "denied" || r.attrs["key"] != "" {
			t.Errorf("denial summary %v", r)
		}
		n[r.attrs["suppressed"]] = true
	}
	if !n["2"] || !n["1"] {
		t.Errorf("denial summaries %v, want counts 2 (erin) and 1 (frank)", recs)
	}
}

// Concurrent failures of one Limiter while the clock stands still: one
// record, and after the interval one count of all the others (run with
// -race).
func TestLogDenialsRepeatsConcurrent(t *testing.T) {
	var mu sync.Mutex
	now := slogT0
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	h := &slogCapture{level: slog.LevelDebug}
	observe := sloglimit.New(slog.New(h), sloglimit.WithClock(clock))
	const goroutines, each = 8, 200
	var wg sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				observe(core.Event{Limiter: "api", Outcome: core.OutcomeFailedOpen, Err: errSlogDown})
			}
		}()
	}
	wg.Wait()
	if recs := h.take(); len(recs) != 1 {
		t.Fatalf("%d records, want 1", len(recs))
	}
	mu.Lock()
	now = now.Add((10 * time.Second))
	mu.Unlock()
	observe(core.Event{Limiter: "api", Outcome: core.OutcomeSkipped})
	recs := h.take()
	if len(recs) != 1 || recs[0].attrs["suppressed"] != fmt.Sprint(goroutines*each-1) {
		t.Errorf("count: %v", recs)
	}
}

func TestLogDenialsShadowAndDelayed(t *testing.T) {
	l, h := slogLimiter(t, nil, []store.Limit{store.PerSecond(1)}, nil, core.WithShadow())
	l.Decide(slogRequest("alice"))
	l.Decide(slogRequest("alice"))
	recs := h.take()
	if len(recs) != 1 {
		t.Fatalf("shadow: %d records, want 1: %v", len(recs), recs)
	}
	wantRecord(t, recs[0], slog.LevelInfo, "sluice: rate limit exceeded (shadow mode)", map[string]string{
		"limiter": "api", "outcome": "shadow_denied", "action": "serve", "method": "POST", "path": "/orders",
		"cost": "1", "limit": "1", "remaining": "0", "retry_after": "1s",
	})

	leaky := []store.Limit{{Algorithm: store.LeakyBucket, Rate: 1, Period: time.Second, Burst: 1}}
	l, h = slogLimiter(t, nil, leaky, nil)
	l.Decide(slogRequest("alice")) // served at once: not logged
	l.Decide(slogRequest("alice")) // queued for 1s
	recs = h.take()
	if len(recs) != 1 {
		t.Fatalf("leaky: %d records, want 1: %v", len(recs), recs)
	}
	wantRecord(t, recs[0], slog.LevelDebug, "sluice: request delayed by rate limit", map[string]string{
		"limiter": "api", "outcome": "delayed", "action": "hold", "method": "POST", "path": "/orders",
		"cost": "1", "limit": "2", "remaining": "0", "delay": "1s",
	})
}

func TestLogDenialsKey(t *testing.T) {
	one := []store.Limit{store.PerSecond(1)}
	for name, tc := range map[string]struct {
		opts []sloglimit.Option
		want string // "" for no key attribute
	}{
		"default":  {nil, ""},
		"raw":      {[]sloglimit.Option{sloglimit.WithKey(nil)}, "alice"},
		"redacted": {[]sloglimit.Option{sloglimit.WithKey(func(k string) string { return k[:1] + "…" })}, "a…"},
	} {
		l, h := slogLimiter(t, nil, one, tc.opts)
		l.Decide(slogRequest("alice"))
		l.Decide(slogRequest("alice"))
		recs := h.take()
		if len(recs) != 1 {
			t.Fatalf("%s: %d records", name, len(recs))
		}
		if got, ok := recs[0].attrs["key"]; got != tc.want || ok != (tc.want != "") {
			t.Errorf("%s: key attribute %q (present %v), want %q", name, got, ok, tc.want)
		}
	}
}

func TestLogDenialsLevels(t *testing.T) {
	one := []store.Limit{store.PerSecond(1)}
	// Denials lowered to Debug, allowed decisions turned on at Info.
	l, h := slogLimiter(t, nil, one, []sloglimit.Option{
		sloglimit.WithLevel(core.OutcomeDenied, slog.LevelDebug),
		sloglimit.WithLevel(core.OutcomeAllowed, slog.LevelInfo),
		nil, // ignored
	})
	h.level = slog.LevelInfo
	l.Decide(slogRequest("alice"))
	l.Decide(slogRequest("alice"))
	recs := h.take()
	if len(recs) != 1 || recs[0].attrs["outcome"] != "allowed" || recs[0].level != slog.LevelInfo {
		t.Errorf("records %v, want the allowed one only", recs)
	}

	// Off, even for a Debug handler.
	l, h = slogLimiter(t, nil, one, []sloglimit.Option{sloglimit.WithLevel(core.OutcomeDenied, sloglimit.LevelOff)})
	l.Decide(slogRequest("alice"))
	l.Decide(slogRequest("alice"))
	if recs := h.take(); len(recs) != 0 {
		t.Errorf("denials off: %v", recs)
	}

	// A key error under KeyErrorPerAddress is logged at key_error's level
	// although its outcome (allowed) is not logged; off with key_error.
	l, h = slogLimiter(t, nil, one, nil)
	l.Decide(slogRequest(""))
	recs = h.take()
	if len(recs) != 1 || recs[0].level != slog.LevelWarn || recs[0].attrs["outcome"] != "allowed" ||
		recs[0].attrs["key_error"] != core.ErrNoKey.Error() || recs[0].msg != "sluice: request allowed" {
		t.Errorf("shared key error: %v", recs)
	}
	l, h = slogLimiter(t, nil, one, []sloglimit.Option{sloglimit.WithLevel(core.OutcomeKeyError, sloglimit.LevelOff)})
	l.Decide(slogRequest(""))
	if recs := h.take(); len(recs) != 0 {
		t.Errorf("key errors off: %v", recs)
	}

	// A negative cost is a bug in the cost function: Warn.
	l, h = slogLimiter(t, nil, one, nil, core.WithCost(func(*http.Request) int64 { return -1 }))
	l.Decide(slogRequest("alice"))
	recs = h.take()
	if len(recs) != 1 || recs[0].level != slog.LevelWarn || !strings.Contains(recs[0].attrs["err"], "negative cost") {
		t.Errorf("negative cost: %v", recs)
	}

	// Not enabled: nothing reaches the handler.
	l, h = slogLimiter(t, nil, one, nil)
	h.level = slog.LevelWarn
	l.Decide(slogRequest("alice"))
	l.Decide(slogRequest("alice"))
	if recs := h.take(); len(recs) != 0 {
		t.Errorf("Info denial with a Warn handler: %v", recs)
	}
}

// Events from a caller other than a Limiter: no request, an outcome this
// version does not know.
func TestLogDenialsBareEvents(t *testing.T) {
	h := &slogCapture{level: slog.LevelDebug}
	observe := sloglimit.New(slog.New(h))
	observe(core.Event{Limiter: "x", Key: "a", Outcome: core.OutcomeDenied, Cost: 2, Result: store.Result{Limit: 5, RetryAfter: time.Second}})
	observe(core.Event{Limiter: "x", Outcome: core.Outcome(200)})
	observe(core.Event{Limiter: "x", Key: "b", Outcome: core.OutcomeDenied, Cost: 9, Result: store.Result{Limit: 5, RetryAfter: store.InfDuration}})
	recs := h.take()
	if len(recs) != 3 {
		t.Fatalf("%d records", len(recs))
	}
	wantRecord(t, recs[0], slog.LevelInfo, "sluice: rate limit exceeded", map[string]string{
		"limiter": "x", "outcome": "denied", "action": "serve", "cost": "2", "limit": "5", "remaining": "0", "retry_after": "1s",
	})
	wantRecord(t, recs[1], slog.LevelInfo, "sluice: decision", map[string]string{
		"limiter": "x", "outcome": "outcome(200)", "action": "serve", "cost": "0",
	})
	// A cost the limit never admits: no wait helps.
	wantRecord(t, recs[2], slog.LevelInfo, "sluice: rate limit exceeded", map[string]string{
		"limiter": "x", "outcome": "denied", "action": "serve", "cost": "9", "limit": "5", "remaining": "0", "retry_after": "never",
	})
}

// A nil logger logs to slog.Default() as it is at each record.
func TestLogDenialsNilLogger(t *testing.T) {
	old := slog.Default()
	defer slog.SetDefault(old)
	observe := sloglimit.New(nil)
	h := &slogCapture{level: slog.LevelDebug}
	slog.SetDefault(slog.New(h))
	observe(core.Event{Limiter: "x", Outcome: core.OutcomeFailedClosed, Err: errSlogDown})
	if recs := h.take(); len(recs) != 1 || recs[0].level != slog.LevelError {
		t.Errorf("records %v", recs)
	}
}

func ExampleNew() {
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{} // for a stable output
			}
			return a
		},
	}))
	now := func() time.Time { return time.Unix(1_700_000_000, 0) } // a stopped clock
	byClient := func(r *http.Request) (string, error) { return r.Header.Get("X-Client"), nil }
	limiter, err := core.New(memorystore.New(memorystore.WithClock(now)),

		"api", byClient,
		[]store.Limit{store.PerSecond(1)},
		core.WithClock(now),
		core.WithObserver(sloglimit.New(logger)))
	if err != nil {
		panic(err)
	}
	for i := 0; i < 2; i++ {
		r := httptest.NewRequest(http.MethodGet, "/search", nil)
		r.Header.Set("X-Client", "203.0.113.7") // not logged: see LogKey
		limiter.Decide(r)
	}
	// Output:
	// level=INFO msg="sluice: rate limit exceeded" limiter=api outcome=denied action=refuse method=GET path=/search cost=1 limit=1 remaining=0 retry_after=1s
}

// countingWriter counts the bytes written to it.
type countingWriter struct {
	mu sync.Mutex
	n  int
}

func (w *countingWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	w.n += len(p)
	w.mu.Unlock()
	return len(p), nil
}

// A client sending 1 MB paths and keys cannot flood the log (issue 20: 20
// denials with 900 KB paths wrote 18 MB): the fields are cut to
// MaxLogField, and repeated denials of one key make one record per
// interval; with aggregation off, every record is still under 2 KB.
func TestLogDenialsFloodBounded(t *testing.T) {
	huge := "/" + strings.Repeat("p", 1<<20)
	hugeKey := strings.Repeat("k", 1<<20)
	for _, c := range []struct {
		name     string
		opts     []sloglimit.Option
		records  int
		maxBytes int
	}{
		{"aggregated", []sloglimit.Option{sloglimit.WithKey(nil)}, 1, 2 << 10},
		{"every record", []sloglimit.Option{sloglimit.WithKey(nil), sloglimit.WithRepeatInterval(0)}, 19, 19 * 2 << 10},
	} {
		w := &countingWriter{}
		h := &slogCapture{level: slog.LevelDebug}
		json := slog.NewJSONHandler(w, nil)
		observe := sloglimit.New(slog.New(slogTee{json, h}), c.opts...)
		l, err := core.New(memorystore.New(memorystore.WithClock(slogStopped)),
			"api", slogClientKey, []store.Limit{store.PerSecond(1)},
			core.WithClock(slogStopped), core.WithObserver(observe))
		if err != nil {
			t.Fatal(err)
		}
		for range 20 {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.URL.Path = huge
			r.Header.Set("X-Client", hugeKey)
			l.Decide(r)
		}
		recs := h.take()
		t.Logf("%s: 20 requests with 1 MB paths and keys: %d records, %d bytes of JSON", c.name, len(recs), w.n)
		if len(recs) != c.records || w.n > c.maxBytes {
			t.Errorf("%s: %d records, %d bytes; want %d records, at most %d bytes", c.name, len(recs), w.n, c.records, c.maxBytes)
		}
		for _, r := range recs {
			for _, a := range []string{"path", "key"} {
				if v := r.attrs[a]; len(v) > 256+len("…(truncated)") || !strings.HasSuffix(v, "…(truncated)") {
					t.Errorf("%s: %s of %d bytes, want at most %d and marked truncated", c.name, a, len(v), 256)
				}
			}
		}
	}
}

// slogTee hands each record to two handlers.
type slogTee [2]slog.Handler

func (t slogTee) Enabled(ctx context.Context, l slog.Level) bool {
	return t[0].Enabled(ctx, l) || t[1].Enabled(ctx, l)
}
func (t slogTee) Handle(ctx context.Context, r slog.Record) error {
	_ = t[0].Handle(ctx, r.Clone())
	return t[1].Handle(ctx, r)
}
func (t slogTee) WithAttrs([]slog.Attr) slog.Handler { return t }
func (t slogTee) WithGroup(string) slog.Handler      { return t }

// Denials are told apart for at most 1024 client keys: the denials of
// further keys are counted together per Limiter, until tracked keys have
// been quiet for an interval.
func TestLogDenialsManyKeys(t *testing.T) {
	clock := &slogClock{now: slogT0}
	h := &slogCapture{level: slog.LevelDebug}
	observe := sloglimit.New(slog.New(h), sloglimit.WithClock(clock.Now))
	deny := func(key string) {
		observe(core.Event{Limiter: "api", Key: key, Outcome: core.OutcomeDenied, Cost: 1, Result: store.Result{Limit: 1, RetryAfter: time.Second}})
	}
	const keys = 2000
	for i := range 2 * keys {
		deny(fmt.Sprint("client-", i%keys))
	}
	if recs := h.take(); len(recs) != 1024+1 {
		t.Fatalf("%d records of denials of %d keys, want 1025 (1024 keys apart, then the others together)", len(recs), keys)
	}
	clock.Advance((10 * time.Second))
	observe(core.Event{Limiter: "api", Outcome: core.OutcomeAllowed})
	summaries, others := 0, ""
	for _, r := range h.take() {
		summaries++
		if r.attrs["other_keys"] == "true" {
			others = r.attrs["suppressed"]
		}
	}
	// The 1024 tracked keys left out one denial each; the 976 others, 2·976 - 1.
	if summaries != 1025 || others != fmt.Sprint(2*(keys-1024)-1) {
		t.Errorf("%d summaries, other keys' count %q; want 1025 and %d", summaries, others, 2*(keys-1024)-1)
	}
	// Two intervals later the quiet keys are dropped: a new key is told
	// apart again.
	clock.Advance(2 * (10 * time.Second))
	deny("newcomer")
	deny("newcomer")
	clock.Advance((10 * time.Second))
	observe(core.Event{Limiter: "api", Outcome: core.OutcomeAllowed})
	recs := h.take()
	if len(recs) != 2 || recs[1].attrs["other_keys"] != "" || recs[1].attrs["suppressed"] != "1" {
		t.Errorf("a new key after the quiet ones were dropped: %v", recs)
	}
}

// policyName names each failure policy for subtests.
var policyName = map[core.FailurePolicy]string{core.FailLocal: "local", core.FailOpen: "open", core.FailClosed: "closed"}
