package keyfuncs_test

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfuncs"
)

// Without options, IP keys by the connection's peer and ignores every
// forwarding header: a client cannot pick its own key.
func ExampleIP() {
	key, err := keyfuncs.IP()
	if err != nil {
		panic(err)
	}
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "198.51.100.23:51234"
	r.Header.Set("X-Forwarded-For", "192.0.2.1") // written by the client: ignored
	fmt.Println(key(r))

	r.RemoteAddr = "[::ffff:198.51.100.23]:51234" // IPv4-mapped: keyed as IPv4
	fmt.Println(key(r))
	// Output:
	// 198.51.100.23 <nil>
	// 198.51.100.23 <nil>
}

// Behind proxies that write the RFC 7239 Forwarded header.
func ExampleWithForwardingHeader() {
	key, err := keyfuncs.IP(keyfuncs.WithTrustedProxies("10.0.0.0/8"), keyfuncs.WithForwardingHeader("Forwarded"))
	if err != nil {
		panic(err)
	}
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "10.1.2.3:40000"
	r.Header.Set("Forwarded", `for=192.0.2.60;proto=https, for="[2001:db8:cafe::17]:4711", for=10.0.0.5`)
	fmt.Println(key(r))
	// Output:
	// 2001:db8:cafe::/56 <nil>
}

// Behind a proxy that sets a single client address, such as nginx's
// X-Real-IP or Cloudflare's CF-Connecting-IP.
func ExampleWithForwardingHeader_singleAddress() {
	key, err := keyfuncs.IP(
		keyfuncs.WithTrustedProxies("192.0.2.10"),
		keyfuncs.WithForwardingHeader("X-Real-IP"))
	if err != nil {
		panic(err)
	}
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "192.0.2.10:8080"
	r.Header.Set("X-Real-IP", "203.0.113.50")
	fmt.Println(key(r))

	// A repeated header is ambiguous: an error, not a guess.
	r.Header.Add("X-Real-IP", "198.51.100.1")
	_, err = key(r)
	fmt.Println(err != nil)
	// Output:
	// 203.0.113.50 <nil>
	// true
}

// Group clients by network: every address of an IPv6 /48 shares one
// allowance, and so does every address of an IPv4 /24.
func ExampleWithIPv6Prefix() {
	key, err := keyfuncs.IP(keyfuncs.WithIPv6Prefix(48), keyfuncs.WithIPv4Prefix(24))
	if err != nil {
		panic(err)
	}
	for _, addr := range []string{"[2001:db8:1:2::1]:443", "[2001:db8:1:ffff::9]:443", "203.0.113.77:80"} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = addr
		fmt.Println(key(r))
	}
	_, err = keyfuncs.IP(keyfuncs.WithIPv6Prefix(129))
	fmt.Println(err != nil)
	// Output:
	// 2001:db8:1::/48 <nil>
	// 2001:db8:1::/48 <nil>
	// 203.0.113.0/24 <nil>
	// true
}

// Key by an API key your handler validates.
func ExampleHeader() {
	key, err := keyfuncs.Header("X-API-Key")
	if err != nil {
		panic(err)
	}
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set("X-API-Key", "k-1234")
	fmt.Println(key(r))

	_, err = key(httptest.NewRequest("GET", "/", nil))
	fmt.Println(errors.Is(err, core.ErrNoKey))
	// Output:
	// k-1234 <nil>
	// true
}

// Values longer than the maximum length are refused, so a client cannot
// fill the store with huge keys.
func ExampleWithMaxLength() {
	key, err := keyfuncs.Header("X-API-Key", keyfuncs.WithMaxLength(16))
	if err != nil {
		panic(err)
	}
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set("X-API-Key", strings.Repeat("x", 17))
	_, err = key(r)
	fmt.Println(err != nil, errors.Is(err, core.ErrNoKey))
	// Output:
	// true false
}

// Tokens signed by an identity provider with Ed25519 (RSA and ECDSA keys
// work the same way); only EdDSA is accepted with such a key.
func ExamplePublicKeys() {
	priv := ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize)) // a fixed key for the example
	now := time.Unix(1_700_000_000, 0)
	key, err := keyfuncs.JWT("sub", keyfuncs.PublicKeys(priv.Public()),
		keyfuncs.WithClock(func() time.Time { return now }))
	if err != nil {
		panic(err)
	}
	tok, err := jwt.NewWithClaims(jwt.SigningMethodEdDSA, jwt.MapClaims{
		"sub": "user-7", "exp": now.Add(time.Hour).Unix(),
	}).SignedString(priv)
	if err != nil {
		panic(err)
	}
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set("Authorization", "Bearer "+tok)
	fmt.Println(key(r))

	// An hour later the token has expired.
	now = now.Add(time.Hour)
	_, err = key(r)
	fmt.Println(errors.Is(err, keyfuncs.ErrInvalidToken), errors.Is(err, jwt.ErrTokenExpired))
	// Output:
	// user-7 <nil>
	// true true
}

// Choose the verification key by the token's "kid" header, as from a JWKS.
// The accepted algorithms are fixed up front, never taken from the token.
func ExampleKeyLookup() {
	secrets := map[string][]byte{
		"2025": []byte("Tn4q-Wd8LzX1c7Vb_R5mK0sH3yGjP9aF"),
		"2026": []byte("eB6u_Mx2NcQ9vZ4kJ0rT8wL3hY7pSdG1"),
	}
	lookup := func(t *jwt.Token) (any, error) {
		kid, _ := t.Header["kid"].(string)
		if s, ok := secrets[kid]; ok {
			return s, nil
		}
		return nil, fmt.Errorf("unknown kid %q", kid)
	}
	key, err := keyfuncs.JWT("sub", keyfuncs.KeyLookup(lookup, "HS256"), keyfuncs.WithTokenHeader("X-Token"))
	if err != nil {
		panic(err)
	}
	sign := func(kid, sub string) string {
		t := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": sub, "exp": time.Now().Add(time.Hour).Unix()})
		t.Header["kid"] = kid
		s, err := t.SignedString(secrets[kid])
		if err != nil {
			panic(err)
		}
		return s
	}
	for _, tok := range []string{sign("2025", "alice"), sign("2026", "bob")} {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("X-Token", tok)
		fmt.Println(key(r))
	}
	// Output:
	// alice <nil>
	// bob <nil>
}

// Browser sessions carry the token in a cookie.
func ExampleWithTokenCookie() {
	secret := []byte("kZ8-rQ2vN6xW0tLm4Hc9YbS1fJ7dPgE3") // from crypto/rand in real use
	key, err := keyfuncs.JWT("uid", keyfuncs.HMACSecret(secret), keyfuncs.WithTokenCookie("session"))
	if err != nil {
		panic(err)
	}
	tok, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
		"uid": 42, "exp": time.Now().Add(time.Hour).Unix(),
	}).SignedString(secret)
	r := httptest.NewRequest("GET", "/", nil)
	r.AddCookie(&http.Cookie{Name: "session", Value: tok})
	fmt.Println(key(r)) // a number claim keys as "#" and its JSON text
	// Output:
	// #42 <nil>
}

// Several secrets allow rotation: tokens signed with the old one stay
// valid until it is removed.
func ExampleHMACSecret() {
	oldSecret := []byte("Tn4q-Wd8LzX1c7Vb_R5mK0sH3yGjP9aF")
	newSecret := []byte("eB6u_Mx2NcQ9vZ4kJ0rT8wL3hY7pSdG1")
	key, err := keyfuncs.JWT("sub", keyfuncs.HMACSecret(newSecret, oldSecret))
	if err != nil {
		panic(err)
	}
	for _, s := range [][]byte{oldSecret, newSecret} {
		tok, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
			"sub": "alice", "exp": time.Now().Add(time.Hour).Unix(),
		}).SignedString(s)
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("Authorization", "Bearer "+tok)
		fmt.Println(key(r))
	}

	// Secrets shorter than 32 bytes are refused.
	_, err = keyfuncs.JWT("sub", keyfuncs.HMACSecret([]byte("short")))
	fmt.Println(err != nil)
	// Output:
	// alice <nil>
	// alice <nil>
	// true
}

// Tokens must be meant for this API, and a little clock skew between the
// issuer and this server is tolerated.
func ExampleWithAudience() {
	secret := []byte("kZ8-rQ2vN6xW0tLm4Hc9YbS1fJ7dPgE3") // from crypto/rand in real use
	now := time.Unix(1_700_000_000, 0)
	key, err := keyfuncs.JWT("sub", keyfuncs.HMACSecret(secret),
		keyfuncs.WithAudience("https://api.example"),
		keyfuncs.WithLeeway(30*time.Second),
		keyfuncs.WithClock(func() time.Time { return now }))
	if err != nil {
		panic(err)
	}
	sign := func(aud string, exp time.Time) *http.Request {
		tok, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
			"sub": "alice", "aud": aud, "exp": exp.Unix(),
		}).SignedString(secret)
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("Authorization", "Bearer "+tok)
		return r
	}
	fmt.Println(key(sign("https://api.example", now.Add(time.Hour))))
	fmt.Println(key(sign("https://api.example", now.Add(-10*time.Second)))) // within the leeway
	_, err = key(sign("https://other.example", now.Add(time.Hour)))
	fmt.Println(errors.Is(err, keyfuncs.ErrInvalidToken))
	// Output:
	// alice <nil>
	// alice <nil>
	// true
}

// Tokens without "exp" are refused unless WithOptionalExpiration says
// otherwise.
func ExampleWithOptionalExpiration() {
	secret := []byte("kZ8-rQ2vN6xW0tLm4Hc9YbS1fJ7dPgE3") // from crypto/rand in real use
	tok, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "service-a"}).SignedString(secret)
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set("Authorization", "Bearer "+tok)

	strict, err := keyfuncs.JWT("sub", keyfuncs.HMACSecret(secret))
	if err != nil {
		panic(err)
	}
	_, err = strict(r)
	fmt.Println(errors.Is(err, keyfuncs.ErrInvalidToken))

	lenient, err := keyfuncs.JWT("sub", keyfuncs.HMACSecret(secret), keyfuncs.WithOptionalExpiration())
	if err != nil {
		panic(err)
	}
	fmt.Println(lenient(r))
	// Output:
	// true
	// service-a <nil>
}

// Trusted proxies from parsed prefixes, and X-Forwarded-For named
// explicitly.
func ExampleWithTrustedProxies() {
	internal := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}
	var proxies []string
	for _, p := range internal {
		proxies = append(proxies, p.String())
	}
	key, err := keyfuncs.IP(keyfuncs.WithTrustedProxies(proxies...), keyfuncs.WithForwardingHeader("X-Forwarded-For"))
	if err != nil {
		panic(err)
	}
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "[fd00::1]:443"
	r.Header.Set("X-Forwarded-For", "203.0.113.9, 10.2.3.4")
	fmt.Println(key(r))

	// Every hop trusted (a request from inside): the left-most one.
	r.Header.Set("X-Forwarded-For", "10.9.9.9, 10.2.3.4")
	fmt.Println(key(r))
	// Output:
	// 203.0.113.9 <nil>
	// 10.9.9.9 <nil>
}
