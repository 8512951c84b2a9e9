package exampletest

import (
	"bytes"
	"go/parser"
	"go/token"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// CheckRoutes checks the routes of the framework examples on h, their
// handler built on a memory store: GET /api/items/{id} limited to a burst
// of 10 per second per client IP, POST /login to 5 a minute with a
// 15-minute lock-out, GET /health never limited.
func CheckRoutes(t *testing.T, h http.Handler) {
	t.Helper()
	c := &client{t: t, h: h}
	c.checkAPI()
	c.checkLogin()
	c.checkHealth()
}

// CheckImports fails t when a Go file of the package in the current
// directory, tests aside, imports a package internal to sluice: a user
// copies an example's main.go, and could not build it.
func CheckImports(t *testing.T) {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			if path, _ := strconv.Unquote(imp.Path.Value); strings.HasPrefix(path, "github.com/sluicehq/sluice/internal") {
				t.Errorf("%s imports %s, which a copy outside sluice cannot", name, path)
			}
		}
		checked++
	}
	if checked == 0 {
		t.Fatal("no Go file to check in the current directory")
	}
}

// client sends requests to an example's handler.
type client struct {
	t *testing.T
	h http.Handler
}

func (c *client) do(method, path, ip string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, path, nil)
	r.RemoteAddr = ip + ":40000"
	w := httptest.NewRecorder()
	c.h.ServeHTTP(w, r)
	return w
}

// checkAPI: a burst of 10 per second per client, whatever the item.
func (c *client) checkAPI() {
	c.t.Helper()
	for i := 0; i < 10; i++ {
		if w := c.do("GET", "/api/items/"+strconv.Itoa(i), "192.0.2.1"); w.Code != http.StatusOK {
			c.t.Fatalf("api request %d: %d %q", i+1, w.Code, w.Body)
		}
	}
	w := c.do("GET", "/api/items/x", "192.0.2.1")
	if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != "1" {
		c.t.Fatalf("api request 11: %d, Retry-After %q; want 429, 1", w.Code, w.Header().Get("Retry-After"))
	}
	if w := c.do("GET", "/api/items/x", "192.0.2.2"); w.Code != http.StatusOK {
		c.t.Fatalf("another client: %d", w.Code)
	}
}

// checkLogin: 5 a minute, then a 15-minute lock-out. Its limit is its own:
// the client that spent /api (checkAPI) can still log in.
func (c *client) checkLogin() {
	c.t.Helper()
	for i := 0; i < 5; i++ {
		if w := c.do("POST", "/login", "192.0.2.1"); w.Code != http.StatusOK {
			c.t.Fatalf("login %d: %d %q", i+1, w.Code, w.Body)
		}
	}
	w := c.do("POST", "/login", "192.0.2.1")
	if ra, _ := strconv.Atoi(w.Header().Get("Retry-After")); w.Code != http.StatusTooManyRequests || ra < 14*60 || ra > 15*60 {
		c.t.Fatalf("login 6: %d, Retry-After %q; want 429, about 900", w.Code, w.Header().Get("Retry-After"))
	}
}

// checkHealth: never limited.
func (c *client) checkHealth() {
	c.t.Helper()
	for i := 0; i < 50; i++ {
		if w := c.do("GET", "/health", "192.0.2.1"); w.Code != http.StatusOK || w.Header().Get("X-RateLimit-Limit") != "" {
			c.t.Fatalf("health %d: %d, X-RateLimit-Limit %q", i+1, w.Code, w.Header().Get("X-RateLimit-Limit"))
		}
	}
}

// SyncBuffer is a bytes.Buffer safe for concurrent use: a log destination
// written by a server's goroutines and read by the test.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p to the buffer.
func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what has been written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
