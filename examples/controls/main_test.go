package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/internal/exampletest"
	"github.com/sluicehq/sluice/internal/redistest"
)

func TestControls(t *testing.T) {
	// A store whose clock stands still: nothing refills while the test
	// runs, however slowly (pro keys refill one request per 6 ms).
	now := time.Now()
	h, err := newHandler(memorystore.New(memorystore.WithClock(func() time.Time { return now })), "secret")
	if err != nil {
		t.Fatal(err)
	}
	do := func(method, path string, header ...string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(method, path, nil)
		for i := 0; i+1 < len(header); i += 2 {
			r.Header.Set(header[i], header[i+1])
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	status := func(key string) map[string]any {
		w := do("GET", "/rate_limit", "X-API-Key", key)
		var m map[string]any
		if err := json.Unmarshal(w.Body.Bytes(), &m); err != nil || w.Code != http.StatusOK {
			t.Fatalf("/rate_limit: %d %q", w.Code, w.Body)
		}
		return m
	}
	served := func(key string, n int) int {
		ok := 0
		for i := 0; i < n; i++ {
			if do("GET", "/api/items/1", "X-API-Key", key).Code == http.StatusOK {
				ok++
			}
		}
		return ok
	}

	// Plans: each key gets its plan's allowance.
	for key, want := range map[string]int{"free-a": 100, "pro-b": 120, "nobody": 10} {
		if got := served(key, 120); got != want {
			t.Errorf("%s: %d of 120 served, want %d", key, got, want)
		}
	}
	// Status charges nothing and says what the client can still do, as
	// the last response's X-RateLimit-Remaining did.
	before := status("pro-b")
	if s := status("pro-b"); s["remaining"] != before["remaining"] || s["remaining"] != float64(10_000-120) {
		t.Errorf("pro status %v then %v, want remaining %d both times", before, s, 10_000-120)
	}
	if s := status("free-a"); s["allowed"] != false || s["plan"] != "free" || s["retry_after"].(float64) < 1 {
		t.Errorf("exhausted free key: status %v", s)
	}
	// Reset: admin only, then the key is served again at once.
	if w := do("POST", "/admin/reset?key=free-a", "X-Admin-Token", "guess"); w.Code != http.StatusForbidden {
		t.Errorf("reset with a wrong token: %d", w.Code)
	}
	if w := do("POST", "/admin/reset?key=free-a", "X-Admin-Token", "secret"); w.Code != http.StatusNoContent {
		t.Fatalf("reset: %d %q", w.Code, w.Body)
	}
	if s := status("free-a"); s["allowed"] != true || s["remaining"] != float64(100) || s["retry_after"] != float64(0) {
		t.Errorf("after reset: status %v, want allowed with 100 left and no wait", s)
	}
	if w := do("POST", "/admin/reset?key=never-seen", "X-Admin-Token", "secret"); w.Code != http.StatusNotFound {
		t.Errorf("reset of a key with no state: %d %q, want 404", w.Code, w.Body)
	}
	if got := served("free-a", 101); got != 100 {
		t.Errorf("after reset: %d of 101 served, want 100", got)
	}
}

// A user copies main.go: it imports nothing internal to sluice.
func TestImportsNothingInternal(t *testing.T) { exampletest.CheckImports(t) }

func TestOpenStore(t *testing.T) {
	st, closeStore, err := openStore(context.Background(), "")
	if _, ok := st.(*memorystore.Store); !ok || err != nil {
		t.Fatalf(`openStore(""): %T, %v; want a memory store`, st, err)
	}
	closeStore()
	if _, _, err := openStore(context.Background(), "http://localhost"); err == nil {
		t.Error("openStore(http://localhost) succeeded, want an error")
	}

	// With -redis, the same handler keeps its state in Redis.
	st, closeStore, err = openStore(context.Background(), "redis://"+redistest.Shared(t).Addr+"/0")
	if err != nil {
		t.Fatal(err)
	}
	defer closeStore()
	if _, ok := st.(*redisstore.Store); !ok {
		t.Fatalf("openStore(redis://...): %T, want a *redisstore.Store", st)
	}
	h, err := newHandler(st, "secret")
	if err != nil {
		t.Fatal(err)
	}
	key := "free-" + t.Name() // the shared server's other users have other keys
	for _, req := range []struct {
		method, target string
		want           int
	}{
		{"GET", "/api/items/1", http.StatusOK},
		{"POST", "/admin/reset?key=" + key, http.StatusNoContent}, // there is state to reset
	} {
		r := httptest.NewRequest(req.method, req.target, nil)
		r.Header.Set("X-API-Key", key)
		r.Header.Set("X-Admin-Token", "secret")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != req.want {
			t.Fatalf("%s %s on Redis: %d %q, want %d", req.method, req.target, w.Code, w.Body, req.want)
		}
	}
}
