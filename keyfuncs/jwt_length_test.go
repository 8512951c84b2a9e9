package keyfuncs_test

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfuncs"
)

// defaultTokenMaxLength is JWT's documented default bound (WithTokenMaxLength).
const defaultTokenMaxLength = 8192

// forgedToken returns a well-formed HS256 token of about size bytes whose
// payload is one huge claim and whose signature is wrong: what an attacker
// sends to make the server decode and hash a megabyte per request.
func forgedToken(size int) string {
	enc := base64.RawURLEncoding
	header := enc.EncodeToString([]byte(`{"alg":"HS256","typ":"JWT"}`))
	pad := strings.Repeat("x", size*3/4)
	payload := enc.EncodeToString([]byte(`{"sub":"alice","exp":4102444800,"pad":"` + pad + `"}`))
	sig := enc.EncodeToString(make([]byte, 32))
	return header + "." + payload + "." + sig
}

// A token longer than the maximum is refused, as an invalid token, before
// any decoding or signature work: the key lookup is never asked, and the
// refusal allocates nothing in proportion to the token.
func TestJWTTokenMaxLength(t *testing.T) {
	k := keys(t)
	var lookups atomic.Int64
	lookup := func(*jwt.Token) (any, error) { lookups.Add(1); return k.secret, nil }
	huge := forgedToken(1 << 20)
	sources := map[string]struct {
		opt keyfuncs.JWTOption
		req *http.Request
	}{
		"Authorization": {nil, newRequest("192.0.2.1:1", bearer(huge))},
		"header":        {keyfuncs.WithTokenHeader("X-Token"), newRequest("192.0.2.1:1", hdr{"X-Token", huge})},
		"cookie":        {keyfuncs.WithTokenCookie("session"), newRequest("192.0.2.1:1", hdr{"Cookie", "session=" + huge})},
	}
	for name, src := range sources {
		fn := mustJWT(t, "sub", keyfuncs.KeyLookup(lookup, "HS256"), src.opt)
		_, err := fn(src.req)
		if !errors.Is(err, keyfuncs.ErrInvalidToken) || errors.Is(err, core.ErrNoKey) {
			t.Fatalf("%s: %v; want ErrInvalidToken and not ErrNoKey", name, err)
		}
		if want := fmt.Sprintf("token of %d bytes exceeds the maximum of %d", len(huge), defaultTokenMaxLength); !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %q does not say %q", name, err, want)
		}
	}
	if n := lookups.Load(); n != 0 {
		t.Errorf("key looked up %d times for oversized tokens", n)
	}

	fn := mustJWT(t, "sub", keyfuncs.KeyLookup(lookup, "HS256"))
	r := newRequest("192.0.2.1:1", bearer(huge))
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	const runs = 20
	for i := 0; i < runs; i++ {
		if _, err := fn(r); err == nil {
			t.Fatal("accepted")
		}
	}
	runtime.ReadMemStats(&after)
	if perCall := (after.TotalAlloc - before.TotalAlloc) / runs; perCall > 4096 {
		t.Errorf("refusing a %d-byte token allocates %d bytes", len(huge), perCall)
	}
}

// The bound is inclusive, and WithTokenMaxLength moves it.
func TestJWTTokenMaxLengthBound(t *testing.T) {
	k := keys(t)
	valid := sign(t, jwt.SigningMethodHS256, k.secret, claims("alice"))
	req := func() *http.Request { return newRequest("192.0.2.1:1", bearer(valid)) }
	at := mustJWT(t, "sub", keyfuncs.HMACSecret(k.secret), keyfuncs.WithTokenMaxLength(len(valid)))
	checkKey(t, at, req(), ok, "alice")
	below := mustJWT(t, "sub", keyfuncs.HMACSecret(k.secret), keyfuncs.WithTokenMaxLength(len(valid)-1))
	if _, err := below(req()); !errors.Is(err, keyfuncs.ErrInvalidToken) {
		t.Errorf("one byte over: %v", err)
	}
	// A large but real token (a 6 KB claim) passes the default bound.
	big := sign(t, jwt.SigningMethodHS256, k.secret, claims("bob", "groups", strings.Repeat("g", 6000)))
	if len(big) > defaultTokenMaxLength {
		t.Fatalf("test token of %d bytes", len(big))
	}
	checkKey(t, mustJWT(t, "sub", keyfuncs.HMACSecret(k.secret)), newRequest("192.0.2.1:1", bearer(big)), ok, "bob")
	for _, n := range []int{0, -1} {
		if fn, err := keyfuncs.JWT("sub", keyfuncs.HMACSecret(k.secret), keyfuncs.WithTokenMaxLength(n)); err == nil || fn != nil {
			t.Errorf("WithTokenMaxLength(%d) accepted", n)
		}
	}
}

// The cost of a forged token, what a client can make the server spend
// before any limit applies: one over the bound (1 MiB) is refused by its
// length; one just under it (8 KiB) is decoded and its signature checked,
// for each kind of key, a forged token being signed with the attacker's
// own key; a typical token (about 200 bytes) for comparison. The figures
// in the package doc and docs/threat-model.md come from
//
//	go test -run '^$' -bench BenchmarkJWTForgedToken -benchtime 2s ./keyfuncs/
func BenchmarkJWTForgedToken(b *testing.B) {
	k := keys(b)
	ec521, err := ecdsa.GenerateKey(elliptic.P521(), rand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	ec521b, err := ecdsa.GenerateKey(elliptic.P521(), rand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	ec256b, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	_, edb, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	for _, v := range []struct {
		name     string
		key      keyfuncs.JWTKey
		method   jwt.SigningMethod
		attacker any // the forger's key
	}{
		{"HS256", keyfuncs.HMACSecret(k.secret), jwt.SigningMethodHS256, k.secret2},
		{"RS256", keyfuncs.PublicKeys(&k.rsa.PublicKey), jwt.SigningMethodRS256, k.rsa2},
		{"ES256", keyfuncs.PublicKeys(k.ec256.Public()), jwt.SigningMethodES256, ec256b},
		{"ES512", keyfuncs.PublicKeys(ec521.Public()), jwt.SigningMethodES512, ec521b},
		{"EdDSA", keyfuncs.PublicKeys(k.ed.Public()), jwt.SigningMethodEdDSA, edb},
	} {
		fn, err := keyfuncs.JWT("sub", v.key)
		if err != nil {
			b.Fatal(err)
		}
		sizes := []struct {
			name string
			size int
		}{{"typical", 200}, {"8KiB", defaultTokenMaxLength - 100}, {"1MiB", 1 << 20}}
		if v.name != "HS256" {
			sizes = sizes[:2] // refused by length alike
		}
		for _, tc := range sizes {
			tok := forgedSigned(b, v.method, v.attacker, tc.size)
			if (len(tok) > defaultTokenMaxLength) != (tc.size > defaultTokenMaxLength) {
				b.Fatalf("%s/%s: token of %d bytes", v.name, tc.name, len(tok))
			}
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.Header.Set("Authorization", "Bearer "+tok)
			b.Run(v.name+"/"+tc.name, func(b *testing.B) {
				b.ReportAllocs()
				for i := 0; i < b.N; i++ {
					if _, err := fn(r); !errors.Is(err, keyfuncs.ErrInvalidToken) {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// forgedSigned returns a token of about size bytes signed with method under
// the forger's key: well formed, valid but for its signature.
func forgedSigned(b *testing.B, method jwt.SigningMethod, key any, size int) string {
	b.Helper()
	claims := jwt.MapClaims{"sub": "alice", "exp": time.Now().Add(time.Hour).Unix()}
	base, err := jwt.NewWithClaims(method, claims).SignedString(key)
	if err != nil {
		b.Fatal(err)
	}
	if pad := (size - len(base)) * 3 / 4; pad > 8 {
		claims["pad"] = strings.Repeat("x", pad-8)
	}
	tok, err := jwt.NewWithClaims(method, claims).SignedString(key)
	if err != nil {
		b.Fatal(err)
	}
	return tok
}
