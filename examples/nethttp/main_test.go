package main

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/sluicehq/sluice/core"
)

func TestRoutes(t *testing.T) {
	h, err := newHandler(core.NewMemoryStore())
	if err != nil {
		t.Fatal(err)
	}
	do := func(method, path, client string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(method, path, nil)
		r.RemoteAddr = client + ":40000"
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}

	// /api: a burst of 10 per second per client, whatever the item.
	for i := 0; i < 10; i++ {
		if w := do("GET", "/api/items/"+strconv.Itoa(i), "192.0.2.1"); w.Code != http.StatusOK {
			t.Fatalf("api request %d: %d %q", i+1, w.Code, w.Body)
		}
	}
	w := do("GET", "/api/items/x", "192.0.2.1")
	if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != "1" {
		t.Fatalf("api request 11: %d, Retry-After %q; want 429, 1", w.Code, w.Header().Get("Retry-After"))
	}
	if w := do("GET", "/api/items/x", "192.0.2.2"); w.Code != http.StatusOK {
		t.Fatalf("another client: %d", w.Code)
	}

	// /login: 5 a minute, then a 15-minute lock-out. Its limit is its own:
	// the client that spent /api can still log in.
	for i := 0; i < 5; i++ {
		if w := do("POST", "/login", "192.0.2.1"); w.Code != http.StatusOK {
			t.Fatalf("login %d: %d %q", i+1, w.Code, w.Body)
		}
	}
	w = do("POST", "/login", "192.0.2.1")
	if ra, _ := strconv.Atoi(w.Header().Get("Retry-After")); w.Code != http.StatusTooManyRequests || ra < 14*60 || ra > 15*60 {
		t.Fatalf("login 6: %d, Retry-After %q; want 429, about 900", w.Code, w.Header().Get("Retry-After"))
	}

	// /health: never limited.
	for i := 0; i < 50; i++ {
		if w := do("GET", "/health", "192.0.2.1"); w.Code != http.StatusOK || w.Header().Get("X-RateLimit-Limit") != "" {
			t.Fatalf("health %d: %d, X-RateLimit-Limit %q", i+1, w.Code, w.Header().Get("X-RateLimit-Limit"))
		}
	}
}
