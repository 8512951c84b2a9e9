package keyfuncs_test

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/golang-jwt/jwt/v5"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfuncs"
)

func constKey(k string) core.KeyFunc {
	return func(*http.Request) (string, error) { return k, nil }
}

func failKey(err error) core.KeyFunc {
	return func(*http.Request) (string, error) { return "", err }
}

var errBroken = errors.New("broken source")

// decodeJoined parses Join's encoding back into its parts; ok is false if
// key is not a well-formed encoding.
func decodeJoined(key string) (parts []string, ok bool) {
	for {
		colon := strings.IndexByte(key, ':')
		if colon <= 0 {
			return nil, false
		}
		n, err := strconv.Atoi(key[:colon])
		if err != nil || n < 0 || strconv.Itoa(n) != key[:colon] || colon+1+n > len(key) {
			return nil, false
		}
		parts = append(parts, key[colon+1:colon+1+n])
		key = key[colon+1+n:]
		if key == "" {
			return parts, true
		}
		if key[0] != '|' {
			return nil, false
		}
		key = key[1:]
	}
}

func TestJoinEncoding(t *testing.T) {
	tests := []struct {
		parts []string
		want  string
	}{
		{[]string{"abc", "de:fg"}, "3:abc|5:de:fg"},
		{[]string{"a:b", "c"}, "3:a:b|1:c"},
		{[]string{"a", "b:c"}, "1:a|3:b:c"},
		{[]string{"only"}, "4:only"},
		{[]string{"1|2:x", "y"}, "5:1|2:x|1:y"},
		{[]string{"203.0.113.7", "GET /users/{id}"}, "11:203.0.113.7|15:GET /users/{id}"},
		{[]string{"é", "x"}, "2:é|1:x"}, // lengths in bytes
	}
	for _, tt := range tests {
		fns := make([]core.KeyFunc, len(tt.parts))
		for i, p := range tt.parts {
			fns[i] = constKey(p)
		}
		got, err := keyfuncs.Join(fns...)(newRequest("192.0.2.1:1"))
		if err != nil || got != tt.want {
			t.Errorf("Join%q = %q, %v; want %q", tt.parts, got, err, tt.want)
		}
		if back, ok := decodeJoined(got); !ok || fmt.Sprint(back) != fmt.Sprint(tt.parts) {
			t.Errorf("decode(%q) = %q, %v", got, back, ok)
		}
	}
}

func TestJoinInjective(t *testing.T) {
	// Pairs of part lists that naive concatenation with a separator confuses.
	collisions := [][2][]string{
		{{"a:b", "c"}, {"a", "b:c"}},
		{{"a|b", "c"}, {"a", "b|c"}},
		{{"ab", "c"}, {"a", "bc"}},
		{{"1:a", "b"}, {"1", "a|1:b"}},
		{{"x", "y", "z"}, {"x", "y|1:z"}},
		{{"x", "y"}, {"x", "y", "z"}},
	}
	r := newRequest("192.0.2.1:1")
	for _, c := range collisions {
		var keys [2]string
		for i, parts := range c {
			fns := make([]core.KeyFunc, len(parts))
			for j, p := range parts {
				fns[j] = constKey(p)
			}
			k, err := keyfuncs.Join(fns...)(r)
			if err != nil {
				t.Fatal(err)
			}
			keys[i] = k
		}
		if keys[0] == keys[1] {
			t.Errorf("Join%q and Join%q share key %q", c[0], c[1], keys[0])
		}
	}
}

func TestJoinErrors(t *testing.T) {
	r := newRequest("192.0.2.1:1")
	tests := []struct {
		name  string
		fn    core.KeyFunc
		noKey bool
		is    error
	}{
		{"no functions", keyfuncs.Join(), false, nil},
		{"nil function", keyfuncs.Join(constKey("a"), nil), false, nil},
		{"part without key", keyfuncs.Join(constKey("a"), failKey(fmt.Errorf("x: %w", core.ErrNoKey))), true, nil},
		{"broken part", keyfuncs.Join(failKey(errBroken), constKey("a")), false, errBroken},
		{"empty part", keyfuncs.Join(constKey("a"), constKey("")), true, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k, err := tt.fn(r)
			if err == nil || k != "" {
				t.Fatalf("got %q, %v; want an error", k, err)
			}
			if errors.Is(err, core.ErrNoKey) != tt.noKey {
				t.Fatalf("errors.Is(%v, ErrNoKey) = %v", err, !tt.noKey)
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Fatalf("%v does not wrap %v", err, tt.is)
			}
		})
	}
	// Join stops at the first failing part.
	var calls atomic.Int32
	counting := func(*http.Request) (string, error) { calls.Add(1); return "x", nil }
	_, _ = keyfuncs.Join(failKey(errBroken), counting)(r)
	if calls.Load() != 0 {
		t.Fatal("Join called a part after a failure")
	}
}

func TestFallback(t *testing.T) {
	r := newRequest("192.0.2.1:1")
	noKeyErr := fmt.Errorf("no token: %w", core.ErrNoKey)
	tests := []struct {
		name string
		fn   core.KeyFunc
		key  string
	}{
		{"first succeeds", keyfuncs.Fallback(constKey("alice"), constKey("192.0.2.1")), "0:alice"},
		{"falls through on ErrNoKey", keyfuncs.Fallback(failKey(noKeyErr), constKey("192.0.2.1")), "1:192.0.2.1"},
		{"falls through on other errors", keyfuncs.Fallback(failKey(errBroken), constKey("192.0.2.1")), "1:192.0.2.1"},
		{"falls through on empty keys", keyfuncs.Fallback(constKey(""), constKey("192.0.2.1")), "1:192.0.2.1"},
		{"third source", keyfuncs.Fallback(failKey(noKeyErr), failKey(errBroken), constKey("z")), "2:z"},
		{"single source", keyfuncs.Fallback(constKey("a")), "0:a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkKey(t, tt.fn, r, ok, tt.key)
		})
	}

	// A user named like an address never shares the address's bucket.
	user := keyfuncs.Fallback(constKey("192.0.2.1"), constKey("192.0.2.1"))
	ip := keyfuncs.Fallback(failKey(noKeyErr), constKey("192.0.2.1"))
	ku, _ := user(r)
	ki, _ := ip(r)
	if ku == ki {
		t.Fatalf("user and IP sources share key %q", ku)
	}

	// Fallback stops at the first success.
	var calls atomic.Int32
	counting := func(*http.Request) (string, error) { calls.Add(1); return "x", nil }
	_, _ = keyfuncs.Fallback(constKey("a"), counting)(r)
	if calls.Load() != 0 {
		t.Fatal("Fallback called a source after a success")
	}
}

func TestFallbackErrors(t *testing.T) {
	r := newRequest("192.0.2.1:1")
	noKeyErr := fmt.Errorf("no token: %w", core.ErrNoKey)
	tests := []struct {
		name  string
		fn    core.KeyFunc
		noKey bool
		is    []error
		isNot []error
	}{
		{"no functions", keyfuncs.Fallback(), false, nil, nil},
		{"nil function", keyfuncs.Fallback(failKey(noKeyErr), nil), false, nil, nil},
		{"every source anonymous", keyfuncs.Fallback(failKey(noKeyErr), constKey("")), true, nil, nil},
		{"one source broken", keyfuncs.Fallback(failKey(noKeyErr), failKey(errBroken)), false, []error{errBroken}, []error{core.ErrNoKey}},
		{"invalid token then no address", keyfuncs.Fallback(failKey(fmt.Errorf("%w: forged", keyfuncs.ErrInvalidToken)), failKey(noKeyErr)), false, []error{keyfuncs.ErrInvalidToken}, []error{core.ErrNoKey}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k, err := tt.fn(r)
			if err == nil || k != "" {
				t.Fatalf("got %q, %v; want an error", k, err)
			}
			if errors.Is(err, core.ErrNoKey) != tt.noKey {
				t.Fatalf("errors.Is(%v, ErrNoKey) = %v", err, !tt.noKey)
			}
			for _, e := range tt.is {
				if !errors.Is(err, e) {
					t.Fatalf("%v does not wrap %v", err, e)
				}
			}
			for _, e := range tt.isNot {
				if errors.Is(err, e) {
					t.Fatalf("%v wraps %v", err, e)
				}
			}
		})
	}
	// The message names every source's failure.
	_, err := keyfuncs.Fallback(failKey(noKeyErr), failKey(errBroken))(r)
	if msg := err.Error(); !strings.Contains(msg, "source 0: no token") || !strings.Contains(msg, "source 1: broken source") {
		t.Fatalf("message %q does not list the sources", msg)
	}
}

// The usual composition: a verified user, else the IP address. A forged or
// expired token falls through to the IP; it never reaches the user's bucket.
func TestFallbackJWTThenIP(t *testing.T) {
	k := keys(t)
	user := mustJWT(t, "sub", keyfuncs.HMACSecret(k.secret))
	fn := keyfuncs.Fallback(user, mustIP(t))
	valid := sign(t, jwt.SigningMethodHS256, k.secret, claims("alice"))
	forged := tamper(t, valid, claims("bob"))
	tests := []struct {
		name    string
		headers []hdr
		key     string
	}{
		{"valid token", []hdr{bearer(valid)}, "0:alice"},
		{"no token", nil, "1:203.0.113.7"},
		{"forged token", []hdr{bearer(forged)}, "1:203.0.113.7"},
		{"expired token", []hdr{bearer(sign(t, jwt.SigningMethodHS256, k.secret, claims("alice", "exp", int64(1))))}, "1:203.0.113.7"},
		{"user named like an IP", []hdr{bearer(sign(t, jwt.SigningMethodHS256, k.secret, claims("203.0.113.7")))}, "0:203.0.113.7"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkKey(t, fn, newRequest("203.0.113.7:1", tt.headers...), ok, tt.key)
		})
	}
}
