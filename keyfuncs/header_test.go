package keyfuncs_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfuncs"
)

// defaultHeaderMaxLength is Header's documented default bound (WithMaxLength).
const defaultHeaderMaxLength = 512

func TestHeader(t *testing.T) {
	fn, err := keyfuncs.Header("x-api-key") // any case
	if err != nil {
		t.Fatal(err)
	}
	short, err := keyfuncs.Header("X-API-Key", keyfuncs.WithMaxLength(4))
	if err != nil {
		t.Fatal(err)
	}
	key := func(v string) hdr { return hdr{"X-Api-Key", v} }
	tests := []struct {
		name    string
		fn      core.KeyFunc
		headers []hdr
		want    outcome
		key     string
	}{
		{"present", fn, []hdr{key("k-123")}, ok, "k-123"},
		{"value kept verbatim", fn, []hdr{key("a:b|c {tag}")}, ok, "a:b|c {tag}"},
		{"missing", fn, nil, noKey, ""},
		{"empty", fn, []hdr{key("")}, noKey, ""},
		{"other header does not count", fn, []hdr{{"X-Api-Token", "k-123"}}, noKey, ""},
		{"two lines are ambiguous", fn, []hdr{key("k-1"), key("k-2")}, badData, ""},
		{"default maximum length", fn, []hdr{key(strings.Repeat("k", defaultHeaderMaxLength))}, ok, strings.Repeat("k", defaultHeaderMaxLength)},
		{"over the default maximum", fn, []hdr{key(strings.Repeat("k", defaultHeaderMaxLength+1))}, badData, ""},
		{"custom maximum, at it", short, []hdr{key("abcd")}, ok, "abcd"},
		{"custom maximum, over it", short, []hdr{key("abcde")}, badData, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkKey(t, tt.fn, newRequest("192.0.2.1:1", tt.headers...), tt.want, tt.key)
		})
	}
	if _, err := fn(nil); err == nil {
		t.Fatal("nil request accepted")
	}
}

func TestHeaderConfigErrors(t *testing.T) {
	for _, tt := range []struct {
		name   string
		header string
		opts   []keyfuncs.HeaderOption
	}{
		{"empty name", "", nil},
		{"space in name", "X API Key", nil},
		{"colon in name", "X-Key:", nil},
		{"zero max length", "X-Key", []keyfuncs.HeaderOption{keyfuncs.WithMaxLength(0)}},
		{"negative max length", "X-Key", []keyfuncs.HeaderOption{keyfuncs.WithMaxLength(-1)}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			fn, err := keyfuncs.Header(tt.header, tt.opts...)
			if err == nil || fn != nil {
				t.Fatalf("Header(%q) = %v, %v; want an error", tt.header, fn != nil, err)
			}
		})
	}
}

// routeServer is a real http.ServeMux whose handlers answer with the key
// (or "error: ..." and whether it wraps ErrNoKey), so r.Pattern is set by
// the mux exactly as in production.
func routeServer(t *testing.T, fn core.KeyFunc, patterns ...string) *http.ServeMux {
	t.Helper()
	mux := http.NewServeMux()
	for _, p := range patterns {
		mux.HandleFunc(p, func(w http.ResponseWriter, r *http.Request) {
			k, err := fn(r)
			if err != nil {
				_, _ = io.WriteString(w, "error, nokey="+boolText(errors.Is(err, core.ErrNoKey)))
				return
			}
			_, _ = io.WriteString(w, k)
		})
	}
	return mux
}

func boolText(b bool) string {
	if b {
		return "true"
	}
	return "false"
}

func serve(h http.Handler, method, target string) string {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, target, nil))
	return rec.Body.String()
}

func TestRouteThroughServeMux(t *testing.T) {
	mux := routeServer(t, keyfuncs.Route(),
		"GET /users/{id}",
		"POST /users/{id}",
		"/static/",
		"GET /files/{path...}",
		"api.example.com/v1/{name}",
		"GET /{$}",
	)
	tests := []struct {
		method, target, want string
	}{
		{"GET", "/users/1", "GET /users/{id}"},
		{"GET", "/users/2", "GET /users/{id}"},
		{"GET", "/users/a%2Fb", "GET /users/{id}"},
		{"HEAD", "/users/3", "GET /users/{id}"},
		{"POST", "/users/1", "POST /users/{id}"},
		{"GET", "/static/a.css", "/static/"},
		{"DELETE", "/static/b/c.js", "/static/"},
		{"GET", "/files/a/b/c", "GET /files/{path...}"},
		{"GET", "http://api.example.com/v1/x", "api.example.com/v1/{name}"},
		{"GET", "/", "GET /{$}"},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.target, func(t *testing.T) {
			if got := serve(mux, tt.method, tt.target); got != tt.want {
				t.Fatalf("key = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestRouteWithoutPattern(t *testing.T) {
	// Outside a mux (or with a router that does not set r.Pattern) there
	// is no template, and the raw path is never used instead: while no
	// request has had a pattern, it is a configuration error.
	route := keyfuncs.Route()
	for range 2 {
		if k, err := route(httptest.NewRequest("GET", "/users/1", nil)); k != "" || !errors.Is(err, core.ErrInvalidOption) || errors.Is(err, core.ErrNoKey) {
			t.Fatalf("before any pattern: %q, %v; want a configuration error (ErrInvalidOption)", k, err)
		}
	}

	// A router that sets r.Pattern (as the gin and echo adapters do).
	r := httptest.NewRequest("GET", "/users/1", nil)
	r.Pattern = "/users/:id"
	checkKey(t, route, r, ok, "/users/:id")
	// Once it has seen one, a request without a pattern (no route matched)
	// has no key; another Route KeyFunc remembers for itself.
	checkKey(t, route, httptest.NewRequest("GET", "/nowhere", nil), noKey, "")
	if _, err := keyfuncs.Route()(httptest.NewRequest("GET", "/nowhere", nil)); !errors.Is(err, core.ErrInvalidOption) {
		t.Fatalf("a new Route KeyFunc: %v, want ErrInvalidOption", err)
	}

	if _, err := keyfuncs.Route()(nil); err == nil {
		t.Fatal("nil request accepted")
	}
}

func TestRouteJoinedWithIPThroughServeMux(t *testing.T) {
	ip := mustIP(t)
	mux := routeServer(t, keyfuncs.Join(ip, keyfuncs.Route()), "GET /users/{id}")
	r1 := httptest.NewRequest("GET", "/users/1", nil)
	r1.RemoteAddr = "203.0.113.7:1"
	r2 := httptest.NewRequest("GET", "/users/2", nil)
	r2.RemoteAddr = "203.0.113.7:2"
	var got []string
	for _, r := range []*http.Request{r1, r2} {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, r)
		got = append(got, rec.Body.String())
	}
	want := "11:203.0.113.7|15:GET /users/{id}"
	if got[0] != want || got[1] != want {
		t.Fatalf("keys %q, want both %q", got, want)
	}
}
