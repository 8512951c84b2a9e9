package keyfuncs_test

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/keyfuncs"
	"github.com/sluicehq/sluice/nethttp"
)

func bodyRequest(contentType, body string) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/login", strings.NewReader(body))
	if contentType != "" {
		r.Header.Set("Content-Type", contentType)
	}
	return r
}

func TestBodyField(t *testing.T) {
	k, err := keyfuncs.BodyField("username", keyfuncs.WithMaxLength(16))
	if err != nil {
		t.Fatal(err)
	}
	const form, js = "application/x-www-form-urlencoded", "application/json"
	for _, tc := range []struct {
		ctype, body string
		key         string
		noKey       bool // the error wraps core.ErrNoKey
	}{
		{form, "username=alice&password=x", "alice", false},
		{form + "; charset=utf-8", "password=x&username=b%C3%B6b", "böb", false},
		{form, "username=%23admin", "#admin", false}, // forms have no numbers: as is
		{js, `{"username": "alice", "password": "x"}`, "alice", false},
		{"application/vnd.api+json", `{"user": {"username": "x"}, "USERNAME": "carol"}`, "carol", false}, // any case, top level
		{js, `{"username": 42}`, "#42", false},
		{js, `{"username": "#42"}`, "##42", false},
		{js, `{"username": "42"}`, "42", false},
		// No key.
		{"", "username=alice", "", true},
		{"text/plain", "username=alice", "", true},
		{"multipart/form-data; boundary=x", "--x--", "", true},
		{form, "", "", true},
		{form, "user=alice", "", true},
		{form, "username=", "", true},
		{js, `{"user": "alice"}`, "", true},
		{js, `{"username": null}`, "", true},
		{js, `{"username": ""}`, "", true},
		{js, `{"nested": {"username": "alice"}}`, "", true},
		// Errors, not ErrNoKey.
		{form, "username=a&username=b", "", false},
		{form, "username=%zz", "", false},
		{form, "username=" + strings.Repeat("a", 17), "", false},
		{js, `{"username": "a", "Username": "b"}`, "", false},
		{js, `{"username": true}`, "", false},
		{js, `{"username": ["alice"]}`, "", false},
		{js, `["alice"]`, "", false},
		{js, `{"username": "alice"`, "", false},
		{js, `{"username": "alice"} {}`, "", false},
		{js, "{\"username\": \"al\xffce\"}", "", false},
		{form, "username=al%FFce", "", false},
	} {
		r := bodyRequest(tc.ctype, tc.body)
		key, err := k(r)
		switch {
		case tc.key != "" && (err != nil || key != tc.key):
			t.Errorf("%s %q: key %q, %v; want %q", tc.ctype, tc.body, key, err, tc.key)
		case tc.key == "" && err == nil:
			t.Errorf("%s %q: key %q, want an error", tc.ctype, tc.body, key)
		case tc.key == "" && errors.Is(err, core.ErrNoKey) != tc.noKey:
			t.Errorf("%s %q: error %v; wraps ErrNoKey: %v, want %v", tc.ctype, tc.body, err, !tc.noKey, tc.noKey)
		}
		// The handler reads the body as sent.
		if got, err := io.ReadAll(r.Body); err != nil || string(got) != tc.body {
			t.Errorf("%s %q: the handler reads %q, %v", tc.ctype, tc.body, got, err)
		}
	}
	if _, err := k(nil); err == nil {
		t.Error("nil request: no error")
	}
	if _, err := k(httptest.NewRequest(http.MethodGet, "/", nil)); !errors.Is(err, core.ErrNoKey) {
		t.Errorf("no body: %v", err)
	}
}

// A body over 64 KiB is refused as a key, and the handler still reads all
// of it; closing the body the handler gets closes the original.
func TestBodyFieldLargeBody(t *testing.T) {
	k, err := keyfuncs.BodyField("username")
	if err != nil {
		t.Fatal(err)
	}
	body := "username=alice&pad=" + strings.Repeat("x", 100<<10)
	closed := false
	r := httptest.NewRequest(http.MethodPost, "/", nil)
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	r.Body = closeRecorder{Reader: strings.NewReader(body), closed: &closed}
	if _, err := k(r); err == nil || errors.Is(err, core.ErrNoKey) {
		t.Errorf("100 KiB body: %v, want an error (not ErrNoKey)", err)
	}
	if got, _ := io.ReadAll(r.Body); string(got) != body {
		t.Errorf("the handler reads %d bytes, want %d", len(got), len(body))
	}
	_ = r.Body.Close()
	if !closed {
		t.Error("the original body was not closed")
	}
}

type closeRecorder struct {
	io.Reader
	closed *bool
}

func (c closeRecorder) Close() error { *c.closed = true; return nil }

func TestBodyFieldOptions(t *testing.T) {
	for _, name := range []string{"", strings.Repeat("a", 257), "\xff"} {
		if _, err := keyfuncs.BodyField(name); err == nil {
			t.Errorf("name %q: no error", name)
		}
	}
	if _, err := keyfuncs.BodyField("username", keyfuncs.WithMaxLength(0)); err == nil {
		t.Error("max length 0: no error")
	}
}

// Login attempts limited by the submitted username, whatever the client's
// address, through the middleware: the handler parses the form as usual.
func TestBodyFieldLoginLimit(t *testing.T) {
	k, err := keyfuncs.BodyField("username")
	if err != nil {
		t.Fatal(err)
	}
	l, err := core.New(memorystore.New(), "login", k, []store.Limit{store.PerHour(2)})
	if err != nil {
		t.Fatal(err)
	}
	h := nethttp.Middleware(l)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "hello "+r.PostFormValue("username"))
	}))
	for i, tc := range []struct {
		remote, user string
		code         int
	}{
		{"203.0.113.1:1", "alice", 200}, {"203.0.113.2:1", "alice", 200}, {"203.0.113.3:1", "alice", 429}, {"203.0.113.3:1", "bob", 200},
	} {
		r := bodyRequest("application/x-www-form-urlencoded", "username="+tc.user+"&password=x")
		r.RemoteAddr = tc.remote
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != tc.code || tc.code == 200 && w.Body.String() != "hello "+tc.user {
			t.Errorf("attempt %d: %d %q", i, w.Code, w.Body.String())
		}
	}
}

// FuzzBodyField feeds hostile bodies: never a panic, the body always given
// back as sent, and a key only when valid.
func FuzzBodyField(f *testing.F) {
	f.Add("application/x-www-form-urlencoded", []byte("username=alice&password=x"))
	f.Add("application/json", []byte(`{"username":"alice"}`))
	f.Add("application/json", []byte(`{"USERNAME":1e400,"a":[{"b":null}]}`))
	f.Add("application/json; charset=utf-8", []byte(`{"username":"\ud800"}`))
	f.Add("application/problem+json", []byte(`{"username":{"x":"y"},"username":"a"}`))
	f.Add("application/x-www-form-urlencoded", []byte("username=%zz;username=b"))
	f.Add("text/plain", []byte("username=alice"))
	k, err := keyfuncs.BodyField("username", keyfuncs.WithMaxLength(64))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, ctype string, body []byte) {
		r := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body))
		r.Header.Set("Content-Type", ctype)
		key, err := k(r)
		if err == nil && (key == "" || len(key) > 64 || !utf8.ValidString(key)) {
			t.Errorf("key %q from %q %q", key, ctype, body)
		}
		if got, _ := io.ReadAll(r.Body); !bytes.Equal(got, body) {
			t.Errorf("body given back %q, sent %q", got, body)
		}
	})
}
