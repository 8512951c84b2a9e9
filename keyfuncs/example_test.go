package keyfuncs_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfuncs"
)

// Behind a load balancer at 10.0.0.0/8, the client is the right-most
// X-Forwarded-For address that is not a trusted proxy. Addresses a client
// wrote itself, further left, are never used, and a client connecting
// directly cannot forge its address at all.
func ExampleIP_trustedProxies() {
	key, err := keyfuncs.IP(keyfuncs.WithTrustedProxies("10.0.0.0/8"))
	if err != nil {
		panic(err)
	}

	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "10.0.0.2:41000" // the load balancer
	// The client sent "X-Forwarded-For: 198.51.100.1"; the load balancer
	// appended the address it saw, then an inner proxy appended its own.
	r.Header.Set("X-Forwarded-For", "198.51.100.1, 203.0.113.7, 10.0.0.9")
	fmt.Println(key(r))

	// The same header from a peer that is not a trusted proxy is ignored.
	r.RemoteAddr = "192.0.2.99:5000"
	fmt.Println(key(r))

	// IPv6 clients are grouped by /56, the usual delegation to one
	// customer: they can rotate addresses and /64s inside it.
	r.RemoteAddr = "10.0.0.2:41000"
	r.Header.Set("X-Forwarded-For", "2001:db8:1:2:a:b:c:d")
	fmt.Println(key(r))
	// Output:
	// 203.0.113.7 <nil>
	// 192.0.2.99 <nil>
	// 2001:db8:1::/56 <nil>
}

// A limit per client per route: the parts are length-prefixed, so no part
// can imitate another whatever characters it holds.
func ExampleJoin() {
	apiKey, err := keyfuncs.Header("X-API-Key")
	if err != nil {
		panic(err)
	}
	key := keyfuncs.Join(apiKey, keyfuncs.Route())

	mux := http.NewServeMux()
	mux.HandleFunc("GET /users/{id}", func(w http.ResponseWriter, r *http.Request) {
		k, err := key(r)
		if err != nil {
			http.Error(w, "no key", http.StatusBadRequest)
			return
		}
		_, _ = io.WriteString(w, k)
	})
	for _, path := range []string{"/users/1", "/users/2"} {
		r := httptest.NewRequest("GET", path, nil)
		r.Header.Set("X-API-Key", "k:42")
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, r) // the mux sets r.Pattern
		fmt.Println(rec.Body.String())
	}

	_, err = key(httptest.NewRequest("GET", "/users/1", nil))
	fmt.Println(errors.Is(err, core.ErrNoKey))
	// Output:
	// 4:k:42|15:GET /users/{id}
	// 4:k:42|15:GET /users/{id}
	// true
}

// Key by the verified user, else by IP address. The source's index
// prefixes the key, so a user named "203.0.113.7" and the address
// 203.0.113.7 never share a bucket; a forged token falls back to the IP.
func ExampleFallback() {
	secret := []byte("kZ8-rQ2vN6xW0tLm4Hc9YbS1fJ7dPgE3") // from crypto/rand in real use
	user, err := keyfuncs.JWT("sub", keyfuncs.HMACSecret(secret))
	if err != nil {
		panic(err)
	}
	ip, err := keyfuncs.IP()
	if err != nil {
		panic(err)
	}
	key := keyfuncs.Fallback(user, ip)

	token := func(sub string, key []byte) string {
		s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
			"sub": sub,
			"exp": time.Now().Add(time.Hour).Unix(),
		}).SignedString(key)
		if err != nil {
			panic(err)
		}
		return s
	}
	request := func(tok string) *http.Request {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = "203.0.113.7:5000"
		if tok != "" {
			r.Header.Set("Authorization", "Bearer "+tok)
		}
		return r
	}

	fmt.Println(key(request(token("alice", secret))))
	fmt.Println(key(request(token("203.0.113.7", secret))))
	fmt.Println(key(request("")))
	fmt.Println(key(request(token("alice", []byte("a-forger-guessing-the-secret-xx!")))))
	// Output:
	// 0:alice <nil>
	// 0:203.0.113.7 <nil>
	// 1:203.0.113.7 <nil>
	// 1:203.0.113.7 <nil>
}

// Route keys by the template that matched, so every user ID shares one
// route limit. Routers other than http.ServeMux must set r.Pattern first,
// as sluice's gin and echo adapters do.
func ExampleRoute() {
	key := keyfuncs.Route()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /users/{id}", func(w http.ResponseWriter, r *http.Request) {
		k, _ := key(r)
		_, _ = io.WriteString(w, k)
	})
	for _, path := range []string{"/users/1", "/users/2"} {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		fmt.Println(rec.Body.String())
	}
	// Output:
	// GET /users/{id}
	// GET /users/{id}
}

// A JWT KeyFunc tells an anonymous request (core.ErrNoKey) from one with a
// bad token (ErrInvalidToken), so a Limiter can treat them apart.
func ExampleJWT() {
	secret := []byte("kZ8-rQ2vN6xW0tLm4Hc9YbS1fJ7dPgE3") // from crypto/rand in real use
	key, err := keyfuncs.JWT("sub", keyfuncs.HMACSecret(secret), keyfuncs.WithIssuer("https://auth.example"))
	if err != nil {
		panic(err)
	}

	r := httptest.NewRequest("GET", "/", nil)
	_, err = key(r)
	fmt.Println("no token:", errors.Is(err, core.ErrNoKey), errors.Is(err, keyfuncs.ErrInvalidToken))

	r.Header.Set("Authorization", "Bearer not.a.token")
	_, err = key(r)
	fmt.Println("bad token:", errors.Is(err, core.ErrNoKey), errors.Is(err, keyfuncs.ErrInvalidToken))

	tok, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
		"sub": "alice", "iss": "https://auth.example", "exp": time.Now().Add(time.Hour).Unix(),
	}).SignedString(secret)
	r.Header.Set("Authorization", "Bearer "+tok)
	fmt.Println(key(r))
	// Output:
	// no token: true false
	// bad token: false true
	// alice <nil>
}
