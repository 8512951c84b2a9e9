package route

import (
	"strconv"
	"testing"
)

func TestPattern(t *testing.T) {
	for _, tt := range []struct{ method, path, want string }{
		{"GET", "/users/:id", "GET /users/:id"},
		{"POST", "/users/:id", "POST /users/:id"},
		{"GET", "", ""},
	} {
		if got := Pattern(tt.method, tt.path); got != tt.want {
			t.Errorf("Pattern(%q, %q) = %q, want %q", tt.method, tt.path, got, tt.want)
		}
	}
}

func TestCache(t *testing.T) {
	var c Cache
	for range 2 {
		for _, tt := range []struct{ method, path, want string }{
			{"GET", "/users/:id", "GET /users/:id"},
			{"POST", "/users/:id", "POST /users/:id"},
			{"GET", "/", "GET /"},
			{"GET", "", ""},
		} {
			if got := c.Pattern(tt.method, tt.path); got != tt.want {
				t.Errorf("Cache.Pattern(%q, %q) = %q, want %q", tt.method, tt.path, got, tt.want)
			}
		}
	}
	if n := testing.AllocsPerRun(100, func() { _ = c.Pattern("GET", "/users/:id") }); n != 0 {
		t.Errorf("a cached pattern: %v allocations, want 0", n)
	}
	for i := range maxCached + 10 {
		path := "/p" + strconv.Itoa(i)
		if got := c.Pattern("GET", path); got != "GET "+path {
			t.Fatalf("Cache.Pattern(GET, %q) = %q", path, got)
		}
	}
	if n := c.m.Len(); n != maxCached {
		t.Errorf("the cache holds %d patterns, want at most %d", n, maxCached)
	}
}
