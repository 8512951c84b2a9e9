package keyfuncs_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/keyfuncs"
	"github.com/sluicehq/sluice/nethttp"
)

// Cheap checks first: verifying a token costs CPU (110 to 165 µs for
// HS256, up to 5.5 ms for ES512, with a forged token near the length bound:
// see the package doc), so place a
// Limiter keyed by IP, which costs well under a microsecond, in front of
// the one keyed by the token. A client over its address's limit is then
// refused before any token of its is verified.
func Example_ipLimitBeforeJWT() {
	secret := []byte("kZ8-rQ2vN6xW0tLm4Hc9YbS1fJ7dPgE3") // from crypto/rand in real use
	user, err := keyfuncs.JWT("sub", keyfuncs.HMACSecret(secret))
	if err != nil {
		panic(err)
	}
	ip, err := keyfuncs.IP()
	if err != nil {
		panic(err)
	}
	verified := 0 // how many times a token was verified
	countingUser := func(r *http.Request) (string, error) {
		verified++
		return user(r)
	}

	st := memorystore.New()
	perIP, err := core.New(st, "ip", ip, []store.Limit{store.PerMinute(2)})
	if err != nil {
		panic(err)
	}
	perUser, err := core.New(st, "user", countingUser, []store.Limit{store.PerMinute(100)})
	if err != nil {
		panic(err)
	}
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})
	handler := nethttp.Middleware(perIP)(nethttp.Middleware(perUser)(app)) // IP first

	token, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
		"sub": "alice", "exp": time.Now().Add(time.Hour).Unix(),
	}).SignedString(secret)
	for i := 1; i <= 4; i++ {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = "203.0.113.7:5000"
		r.Header.Set("Authorization", "Bearer "+token)
		w := httptest.NewRecorder()
		handler.ServeHTTP(w, r)
		fmt.Printf("request %d: %d, tokens verified: %d\n", i, w.Code, verified)
	}
	// Output:
	// request 1: 200, tokens verified: 1
	// request 2: 200, tokens verified: 2
	// request 3: 429, tokens verified: 2
	// request 4: 429, tokens verified: 2
}

// The stacked Limiters behind a load balancer: both find the client
// through the balancer, the token Limiter's requests without a valid token
// too (core.WithKeyErrorRule with KeyErrorPerAddress). Without that option they would be charged by
// their peer, the balancer, and one anonymous client over its limit would
// get every other one refused.
func Example_stackedBehindProxy() {
	secret := []byte("yH3b-Qv9s_LrT2xW8mNc4KdZ0pFgJ6aE")
	ipKey, err := keyfuncs.IP(keyfuncs.WithTrustedProxies("10.0.0.0/8")) // the balancers
	if err != nil {
		panic(err)
	}
	jwtKey, err := keyfuncs.JWT("sub", keyfuncs.HMACSecret(secret))
	if err != nil {
		panic(err)
	}
	st := memorystore.New()
	perIP, err := core.New(st, "ip", ipKey, []store.Limit{store.PerMinute(600)})
	if err != nil {
		panic(err)
	}
	perUser, err := core.New(st, "user", jwtKey, []store.Limit{store.PerMinute(1)},
		core.WithKeyErrorRule(core.KeyErrorPerAddress, ipKey)) // without a valid token: by client address
	if err != nil {
		panic(err)
	}
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})
	handler := nethttp.Middleware(perIP)(nethttp.Middleware(perUser)(app)) // IP first

	for _, client := range []string{"203.0.113.7", "203.0.113.7", "198.51.100.9"} {
		r := httptest.NewRequest("GET", "/", nil) // no token
		r.RemoteAddr = "10.0.0.1:5000"            // the balancer
		r.Header.Set("X-Forwarded-For", client)
		w := httptest.NewRecorder()
		handler.ServeHTTP(w, r)
		fmt.Println(client, w.Code)
	}
	// Output:
	// 203.0.113.7 200
	// 203.0.113.7 429
	// 198.51.100.9 200
}
