package keyfuncs_test

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfuncs"
)

// Test keys, generated once per test binary.
type testKeys struct {
	secret, secret2 []byte
	rsa, rsa2       *rsa.PrivateKey
	rsaSmall        *rsa.PrivateKey
	ec256, ec384    *ecdsa.PrivateKey
	ec224           *ecdsa.PrivateKey
	ed              ed25519.PrivateKey
	rsaPubPEM       []byte
}

var (
	keysOnce sync.Once
	keysVal  testKeys
)

func keys(t testing.TB) *testKeys {
	t.Helper()
	keysOnce.Do(func() {
		must := func(err error) {
			if err != nil {
				panic(err)
			}
		}
		k := &keysVal
		k.secret = []byte("q7T-vZ2mK9xLr4Wc8NbY1fHs6JdA0pGe_u3oXiBk5ElCnRyMw-tQ8aVjSh2zDgUF") // 64 bytes: HS512 too
		k.secret2 = []byte("2c8e41f0b7d95a36e8c1f47b0d29a5e3c6b18f")
		var err error
		k.rsa, err = rsa.GenerateKey(rand.Reader, 2048)
		must(err)
		k.rsa2, err = rsa.GenerateKey(rand.Reader, 2048)
		must(err)
		k.rsaSmall, err = rsa.GenerateKey(rand.Reader, 1024)
		must(err)
		k.ec256, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		must(err)
		k.ec384, err = ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
		must(err)
		k.ec224, err = ecdsa.GenerateKey(elliptic.P224(), rand.Reader)
		must(err)
		_, k.ed, err = ed25519.GenerateKey(rand.Reader)
		must(err)
		der, err := x509.MarshalPKIXPublicKey(&k.rsa.PublicKey)
		must(err)
		k.rsaPubPEM = pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
	})
	return &keysVal
}

func sign(t testing.TB, m jwt.SigningMethod, key any, claims jwt.MapClaims) string {
	t.Helper()
	s, err := jwt.NewWithClaims(m, claims).SignedString(key)
	if err != nil {
		t.Fatalf("sign %s: %v", m.Alg(), err)
	}
	return s
}

// claims returns valid claims for sub, with overrides (nil deletes).
func claims(sub any, overrides ...any) jwt.MapClaims {
	now := time.Now()
	c := jwt.MapClaims{
		"sub": sub,
		"exp": now.Add(time.Hour).Unix(),
		"iat": now.Add(-time.Minute).Unix(),
	}
	for i := 0; i+1 < len(overrides); i += 2 {
		name := overrides[i].(string)
		if overrides[i+1] == nil {
			delete(c, name)
		} else {
			c[name] = overrides[i+1]
		}
	}
	return c
}

func bearer(tok string) hdr { return hdr{"Authorization", "Bearer " + tok} }

func mustJWT(t testing.TB, claim string, key keyfuncs.JWTKey, opts ...keyfuncs.JWTOption) core.KeyFunc {
	t.Helper()
	fn, err := keyfuncs.JWT(claim, key, opts...)
	if err != nil {
		t.Fatalf("JWT: %v", err)
	}
	return fn
}

// tamper replaces the payload of a signed token, keeping its signature.
func tamper(t testing.TB, tok string, c jwt.MapClaims) string {
	t.Helper()
	parts := strings.Split(tok, ".")
	payload, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	parts[1] = base64.RawURLEncoding.EncodeToString(payload)
	return strings.Join(parts, ".")
}

// noneToken builds an unsigned "alg":"none" token.
func noneToken(t testing.TB, c jwt.MapClaims) string {
	t.Helper()
	s, err := jwt.NewWithClaims(jwt.SigningMethodNone, c).SignedString(jwt.UnsafeAllowNoneSignatureType)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestJWTVerification(t *testing.T) {
	k := keys(t)
	hmacKey := mustJWT(t, "sub", keyfuncs.HMACSecret(k.secret))
	rsaKey := mustJWT(t, "sub", keyfuncs.PublicKeys(&k.rsa.PublicKey))
	ecKey := mustJWT(t, "sub", keyfuncs.PublicKeys(&k.ec256.PublicKey))
	edKey := mustJWT(t, "sub", keyfuncs.PublicKeys(k.ed.Public()))
	allPublic := mustJWT(t, "sub", keyfuncs.PublicKeys(&k.rsa.PublicKey, &k.ec256.PublicKey, &k.ec384.PublicKey, k.ed.Public()))
	rotated := mustJWT(t, "sub", keyfuncs.HMACSecret(k.secret, k.secret2))

	valid := sign(t, jwt.SigningMethodHS256, k.secret, claims("alice"))
	past := time.Now().Add(-2 * time.Hour)
	type tc struct {
		name string
		fn   core.KeyFunc
		tok  string
		want outcome // ok, noKey, or badData (then invalid says whether ErrInvalidToken)
		key  string
		is   error // an error the result must wrap
	}
	tests := []tc{
		{name: "HS256", fn: hmacKey, tok: valid, key: "alice"},
		{name: "HS384", fn: hmacKey, tok: sign(t, jwt.SigningMethodHS384, k.secret, claims("alice")), key: "alice"},
		{name: "HS512", fn: hmacKey, tok: sign(t, jwt.SigningMethodHS512, k.secret, claims("alice")), key: "alice"},
		{name: "RS256", fn: rsaKey, tok: sign(t, jwt.SigningMethodRS256, k.rsa, claims("bob")), key: "bob"},
		{name: "RS512", fn: rsaKey, tok: sign(t, jwt.SigningMethodRS512, k.rsa, claims("bob")), key: "bob"},
		{name: "PS256", fn: rsaKey, tok: sign(t, jwt.SigningMethodPS256, k.rsa, claims("bob")), key: "bob"},
		{name: "ES256", fn: ecKey, tok: sign(t, jwt.SigningMethodES256, k.ec256, claims("carol")), key: "carol"},
		{name: "EdDSA", fn: edKey, tok: sign(t, jwt.SigningMethodEdDSA, k.ed, claims("dave")), key: "dave"},
		{name: "key set picks RSA", fn: allPublic, tok: sign(t, jwt.SigningMethodRS256, k.rsa, claims("bob")), key: "bob"},
		{name: "key set picks P-384", fn: allPublic, tok: sign(t, jwt.SigningMethodES384, k.ec384, claims("erin")), key: "erin"},
		{name: "key set picks EdDSA", fn: allPublic, tok: sign(t, jwt.SigningMethodEdDSA, k.ed, claims("dave")), key: "dave"},
		{name: "rotated secret, old", fn: rotated, tok: valid, key: "alice"},
		{name: "rotated secret, new", fn: rotated, tok: sign(t, jwt.SigningMethodHS256, k.secret2, claims("alice")), key: "alice"},
		{name: "numeric claim", fn: hmacKey, tok: sign(t, jwt.SigningMethodHS256, k.secret, claims(42)), key: "#42"},
		{name: "large numeric claim exact", fn: hmacKey, tok: sign(t, jwt.SigningMethodHS256, k.secret, claims(json.Number("12345678901234567890"))), key: "#12345678901234567890"},

		{name: "forged payload", fn: hmacKey, tok: tamper(t, valid, claims("mallory")), want: badData, is: jwt.ErrTokenSignatureInvalid},
		{name: "wrong HMAC secret", fn: hmacKey, tok: sign(t, jwt.SigningMethodHS256, k.secret2, claims("alice")), want: badData, is: jwt.ErrTokenSignatureInvalid},
		{name: "wrong RSA key", fn: rsaKey, tok: sign(t, jwt.SigningMethodRS256, k.rsa2, claims("bob")), want: badData, is: jwt.ErrTokenSignatureInvalid},
		{name: "ES256 token, RSA key", fn: rsaKey, tok: sign(t, jwt.SigningMethodES256, k.ec256, claims("bob")), want: badData, is: jwt.ErrTokenSignatureInvalid},
		{name: "ES384 token, P-256 key", fn: ecKey, tok: sign(t, jwt.SigningMethodES384, k.ec384, claims("bob")), want: badData, is: jwt.ErrTokenSignatureInvalid},
		{name: "RS256 token, HMAC key", fn: hmacKey, tok: sign(t, jwt.SigningMethodRS256, k.rsa, claims("bob")), want: badData, is: jwt.ErrTokenSignatureInvalid},
		{name: "HS256 signed with the RSA public key bytes", fn: rsaKey, tok: sign(t, jwt.SigningMethodHS256, k.rsaPubPEM, claims("mallory")), want: badData, is: jwt.ErrTokenSignatureInvalid},
		{name: "HS256 signed with the RSA public key bytes, key set", fn: allPublic, tok: sign(t, jwt.SigningMethodHS256, k.rsaPubPEM, claims("mallory")), want: badData},
		{name: "alg none, HMAC key", fn: hmacKey, tok: noneToken(t, claims("mallory")), want: badData},
		{name: "alg none, RSA key", fn: rsaKey, tok: noneToken(t, claims("mallory")), want: badData},
		{name: "alg none, signature stripped from a valid token", fn: hmacKey, tok: stripToNone(t, valid), want: badData},
		{name: "expired", fn: hmacKey, tok: sign(t, jwt.SigningMethodHS256, k.secret, claims("alice", "exp", past.Unix())), want: badData, is: jwt.ErrTokenExpired},
		{name: "missing exp", fn: hmacKey, tok: sign(t, jwt.SigningMethodHS256, k.secret, claims("alice", "exp", nil)), want: badData, is: jwt.ErrTokenRequiredClaimMissing},
		{name: "exp not a number", fn: hmacKey, tok: sign(t, jwt.SigningMethodHS256, k.secret, claims("alice", "exp", "tomorrow")), want: badData},
		{name: "nbf in the future", fn: hmacKey, tok: sign(t, jwt.SigningMethodHS256, k.secret, claims("alice", "nbf", time.Now().Add(time.Hour).Unix())), want: badData, is: jwt.ErrTokenNotValidYet},
		{name: "nbf in the past", fn: hmacKey, tok: sign(t, jwt.SigningMethodHS256, k.secret, claims("alice", "nbf", past.Unix())), key: "alice"},
		{name: "iat in the future", fn: hmacKey, tok: sign(t, jwt.SigningMethodHS256, k.secret, claims("alice", "iat", time.Now().Add(time.Hour).Unix())), want: badData, is: jwt.ErrTokenUsedBeforeIssued},
		{name: "malformed", fn: hmacKey, tok: "not.a.jwt", want: badData, is: jwt.ErrTokenMalformed},
		{name: "two segments", fn: hmacKey, tok: "abc.def", want: badData, is: jwt.ErrTokenMalformed},

		{name: "claim missing", fn: hmacKey, tok: sign(t, jwt.SigningMethodHS256, k.secret, claims(nil, "sub", nil)), want: noKey},
		{name: "claim null", fn: hmacKey, tok: sign(t, jwt.SigningMethodHS256, k.secret, jwt.MapClaims{"sub": nil, "exp": time.Now().Add(time.Hour).Unix()}), want: noKey},
		{name: "claim empty", fn: hmacKey, tok: sign(t, jwt.SigningMethodHS256, k.secret, claims("")), want: noKey},
		{name: "claim boolean", fn: hmacKey, tok: sign(t, jwt.SigningMethodHS256, k.secret, claims(true)), want: badData},
		{name: "claim object", fn: hmacKey, tok: sign(t, jwt.SigningMethodHS256, k.secret, claims(map[string]any{"id": 1})), want: badData},
		{name: "claim array", fn: hmacKey, tok: sign(t, jwt.SigningMethodHS256, k.secret, claims([]any{"a"})), want: badData},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRequest("192.0.2.1:1", bearer(tt.tok))
			checkKey(t, tt.fn, r, tt.want, tt.key)
			if tt.want == ok {
				return
			}
			_, err := tt.fn(r)
			// Verification failures wrap ErrInvalidToken; an unusable claim
			// of a valid token and an absent claim do not.
			verification := tt.want == badData && !strings.HasPrefix(tt.name, "claim ")
			if errors.Is(err, keyfuncs.ErrInvalidToken) != verification {
				t.Fatalf("errors.Is(%v, ErrInvalidToken) = %v, want %v", err, !verification, verification)
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Fatalf("error %v does not wrap %v", err, tt.is)
			}
		})
	}
}

// stripToNone rewrites a token's header to "alg":"none" and drops its signature.
func stripToNone(t testing.TB, tok string) string {
	t.Helper()
	parts := strings.Split(tok, ".")
	h := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none","typ":"JWT"}`))
	return h + "." + parts[1] + "."
}

func TestJWTClaimsOptions(t *testing.T) {
	k := keys(t)
	secret := keyfuncs.HMACSecret(k.secret)
	now := time.Now()
	hs := func(c jwt.MapClaims) string { return sign(t, jwt.SigningMethodHS256, k.secret, c) }
	tests := []struct {
		name string
		opts []keyfuncs.JWTOption
		tok  string
		ok   bool
		is   error
	}{
		{"issuer matches", []keyfuncs.JWTOption{keyfuncs.WithIssuer("https://auth.example")}, hs(claims("alice", "iss", "https://auth.example")), true, nil},
		{"issuer wrong", []keyfuncs.JWTOption{keyfuncs.WithIssuer("https://auth.example")}, hs(claims("alice", "iss", "https://evil.example")), false, jwt.ErrTokenInvalidIssuer},
		{"issuer missing", []keyfuncs.JWTOption{keyfuncs.WithIssuer("https://auth.example")}, hs(claims("alice")), false, nil},
		{"audience string", []keyfuncs.JWTOption{keyfuncs.WithAudience("api")}, hs(claims("alice", "aud", "api")), true, nil},
		{"audience in list", []keyfuncs.JWTOption{keyfuncs.WithAudience("api")}, hs(claims("alice", "aud", []string{"web", "api"})), true, nil},
		{"one of several audiences", []keyfuncs.JWTOption{keyfuncs.WithAudience("api", "admin")}, hs(claims("alice", "aud", "admin")), true, nil},
		{"audience wrong", []keyfuncs.JWTOption{keyfuncs.WithAudience("api")}, hs(claims("alice", "aud", []string{"web"})), false, jwt.ErrTokenInvalidAudience},
		{"audience missing", []keyfuncs.JWTOption{keyfuncs.WithAudience("api")}, hs(claims("alice")), false, nil},
		{"no audience required", nil, hs(claims("alice", "aud", "anything")), true, nil},
		{"expired within leeway", []keyfuncs.JWTOption{keyfuncs.WithLeeway(time.Minute)}, hs(claims("alice", "exp", now.Add(-20*time.Second).Unix())), true, nil},
		{"expired beyond leeway", []keyfuncs.JWTOption{keyfuncs.WithLeeway(time.Minute)}, hs(claims("alice", "exp", now.Add(-2*time.Minute).Unix())), false, jwt.ErrTokenExpired},
		{"expired without leeway", nil, hs(claims("alice", "exp", now.Add(-20*time.Second).Unix())), false, jwt.ErrTokenExpired},
		{"nbf within leeway", []keyfuncs.JWTOption{keyfuncs.WithLeeway(time.Minute)}, hs(claims("alice", "nbf", now.Add(20*time.Second).Unix())), true, nil},
		{"optional exp, absent", []keyfuncs.JWTOption{keyfuncs.WithOptionalExpiration()}, hs(claims("alice", "exp", nil)), true, nil},
		{"optional exp, present and past", []keyfuncs.JWTOption{keyfuncs.WithOptionalExpiration()}, hs(claims("alice", "exp", now.Add(-time.Hour).Unix())), false, jwt.ErrTokenExpired},
		{"clock after exp", []keyfuncs.JWTOption{keyfuncs.WithClock(func() time.Time { return now.Add(2 * time.Hour) })}, hs(claims("alice")), false, jwt.ErrTokenExpired},
		{"clock before iat", []keyfuncs.JWTOption{keyfuncs.WithClock(func() time.Time { return now.Add(-time.Hour) })}, hs(claims("alice")), false, jwt.ErrTokenUsedBeforeIssued},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fn := mustJWT(t, "sub", secret, tt.opts...)
			got, err := fn(newRequest("192.0.2.1:1", bearer(tt.tok)))
			if tt.ok {
				if err != nil || got != "alice" {
					t.Fatalf("got %q, %v; want alice", got, err)
				}
				return
			}
			if err == nil || !errors.Is(err, keyfuncs.ErrInvalidToken) || errors.Is(err, core.ErrNoKey) {
				t.Fatalf("got %q, %v; want an ErrInvalidToken error", got, err)
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Fatalf("error %v does not wrap %v", err, tt.is)
			}
		})
	}
}

func TestJWTTokenSources(t *testing.T) {
	k := keys(t)
	secret := keyfuncs.HMACSecret(k.secret)
	tok := sign(t, jwt.SigningMethodHS256, k.secret, claims("alice"))
	auth := mustJWT(t, "sub", secret)
	header := mustJWT(t, "sub", secret, keyfuncs.WithTokenHeader("x-auth-token"))
	cookie := mustJWT(t, "sub", secret, keyfuncs.WithTokenCookie("session"))
	withCookie := func(v string) *http.Request {
		r := newRequest("192.0.2.1:1")
		r.AddCookie(&http.Cookie{Name: "session", Value: v})
		return r
	}
	tests := []struct {
		name string
		fn   core.KeyFunc
		r    *http.Request
		want outcome
	}{
		{"bearer", auth, newRequest("192.0.2.1:1", bearer(tok)), ok},
		{"bearer scheme any case", auth, newRequest("192.0.2.1:1", hdr{"Authorization", "bEaReR " + tok}), ok},
		{"bearer extra spaces", auth, newRequest("192.0.2.1:1", hdr{"Authorization", "Bearer   " + tok}), ok},
		{"no Authorization", auth, newRequest("192.0.2.1:1"), noKey},
		{"Basic scheme", auth, newRequest("192.0.2.1:1", hdr{"Authorization", "Basic dXNlcjpwYXNz"}), noKey},
		{"bare token without scheme", auth, newRequest("192.0.2.1:1", hdr{"Authorization", tok}), noKey},
		{"empty bearer", auth, newRequest("192.0.2.1:1", hdr{"Authorization", "Bearer "}), noKey},
		{"bearer garbage", auth, newRequest("192.0.2.1:1", hdr{"Authorization", "Bearer garbage"}), badData},
		{"two Authorization lines", auth, newRequest("192.0.2.1:1", bearer(tok), bearer(tok)), badData},
		{"token in a cookie ignored by default", auth, withCookie(tok), noKey},
		{"custom header, raw", header, newRequest("192.0.2.1:1", hdr{"X-Auth-Token", tok}), ok},
		{"custom header, bearer", header, newRequest("192.0.2.1:1", hdr{"X-Auth-Token", "Bearer " + tok}), ok},
		{"custom header missing", header, newRequest("192.0.2.1:1", bearer(tok)), noKey},
		{"custom header empty bearer", header, newRequest("192.0.2.1:1", hdr{"X-Auth-Token", "Bearer "}), noKey},
		{"custom header twice", header, newRequest("192.0.2.1:1", hdr{"X-Auth-Token", tok}, hdr{"X-Auth-Token", tok}), badData},
		{"cookie", cookie, withCookie(tok), ok},
		{"cookie missing", cookie, newRequest("192.0.2.1:1", bearer(tok)), noKey},
		{"cookie empty", cookie, withCookie(""), noKey},
		{"cookie forged", cookie, withCookie(tamper(t, tok, claims("mallory"))), badData},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkKey(t, tt.fn, tt.r, tt.want, "alice")
		})
	}
	if _, err := auth(nil); err == nil {
		t.Fatal("nil request accepted")
	}
}

func TestJWTKeyLookup(t *testing.T) {
	k := keys(t)
	lookup := func(tok *jwt.Token) (any, error) {
		switch tok.Header["kid"] {
		case "ec":
			return &k.ec256.PublicKey, nil
		case "rsa":
			return &k.rsa.PublicKey, nil
		case "rsa-pem-as-secret":
			return k.rsaPubPEM, nil // a careless lookup; the allowed algorithms still stop confusion
		}
		return nil, errors.New("unknown kid")
	}
	fn := mustJWT(t, "sub", keyfuncs.KeyLookup(lookup, "ES256", "RS256"))
	withKid := func(m jwt.SigningMethod, key any, kid string) string {
		tok := jwt.NewWithClaims(m, claims("alice"))
		tok.Header["kid"] = kid
		s, err := tok.SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	tests := []struct {
		name string
		tok  string
		ok   bool
	}{
		{"ES256 by kid", withKid(jwt.SigningMethodES256, k.ec256, "ec"), true},
		{"RS256 by kid", withKid(jwt.SigningMethodRS256, k.rsa, "rsa"), true},
		{"unknown kid", withKid(jwt.SigningMethodRS256, k.rsa, "other"), false},
		{"wrong kid", withKid(jwt.SigningMethodRS256, k.rsa, "ec"), false},
		{"algorithm not listed", withKid(jwt.SigningMethodRS384, k.rsa, "rsa"), false},
		{"HS256 confusion", withKid(jwt.SigningMethodHS256, k.rsaPubPEM, "rsa-pem-as-secret"), false},
		{"alg none", noneToken(t, claims("alice")), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := fn(newRequest("192.0.2.1:1", bearer(tt.tok)))
			if tt.ok != (err == nil) {
				t.Fatalf("got %q, %v; want success %v", got, err, tt.ok)
			}
			if err != nil && !errors.Is(err, keyfuncs.ErrInvalidToken) {
				t.Fatalf("error %v does not wrap ErrInvalidToken", err)
			}
		})
	}
}

func TestJWTConfigErrors(t *testing.T) {
	k := keys(t)
	lookup := func(*jwt.Token) (any, error) { return k.secret, nil }
	good := keyfuncs.HMACSecret(k.secret)
	tests := []struct {
		name  string
		claim string
		key   keyfuncs.JWTKey
		opts  []keyfuncs.JWTOption
	}{
		{"empty claim", "", good, nil},
		{"zero key", "sub", keyfuncs.JWTKey{}, nil},
		{"no secret", "sub", keyfuncs.HMACSecret(), nil},
		{"short secret", "sub", keyfuncs.HMACSecret([]byte("too short")), nil},
		{"one short secret of two", "sub", keyfuncs.HMACSecret(k.secret, []byte("short")), nil},
		{"no public key", "sub", keyfuncs.PublicKeys(), nil},
		{"nil public key", "sub", keyfuncs.PublicKeys(nil), nil},
		{"nil RSA pointer", "sub", keyfuncs.PublicKeys((*rsa.PublicKey)(nil)), nil},
		{"nil ECDSA pointer", "sub", keyfuncs.PublicKeys((*ecdsa.PublicKey)(nil)), nil},
		{"RSA private key", "sub", keyfuncs.PublicKeys(k.rsa), nil},
		{"ECDSA private key", "sub", keyfuncs.PublicKeys(k.ec256), nil},
		{"Ed25519 private key", "sub", keyfuncs.PublicKeys(k.ed), nil},
		{"secret as public key", "sub", keyfuncs.PublicKeys(k.secret), nil},
		{"RSA 1024", "sub", keyfuncs.PublicKeys(&k.rsaSmall.PublicKey), nil},
		{"P-224", "sub", keyfuncs.PublicKeys(&k.ec224.PublicKey), nil},
		{"short Ed25519", "sub", keyfuncs.PublicKeys(ed25519.PublicKey(make([]byte, 31))), nil},
		{"unsupported type", "sub", keyfuncs.PublicKeys(crypto.PublicKey("key")), nil},
		{"lookup nil", "sub", keyfuncs.KeyLookup(nil, "HS256"), nil},
		{"lookup without algorithms", "sub", keyfuncs.KeyLookup(lookup), nil},
		{"lookup with none", "sub", keyfuncs.KeyLookup(lookup, "none"), nil},
		{"lookup with unknown algorithm", "sub", keyfuncs.KeyLookup(lookup, "HS1"), nil},
		{"lookup mixing HMAC and RSA", "sub", keyfuncs.KeyLookup(lookup, "HS256", "RS256"), nil},
		{"negative leeway", "sub", good, []keyfuncs.JWTOption{keyfuncs.WithLeeway(-time.Second)}},
		{"huge leeway", "sub", good, []keyfuncs.JWTOption{keyfuncs.WithLeeway(time.Hour)}},
		{"empty token header", "sub", good, []keyfuncs.JWTOption{keyfuncs.WithTokenHeader("")}},
		{"bad token header", "sub", good, []keyfuncs.JWTOption{keyfuncs.WithTokenHeader("X Token")}},
		{"bad cookie name", "sub", good, []keyfuncs.JWTOption{keyfuncs.WithTokenCookie("a;b")}},
		{"two token sources", "sub", good, []keyfuncs.JWTOption{keyfuncs.WithTokenHeader("X-Token"), keyfuncs.WithTokenCookie("session")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fn, err := keyfuncs.JWT(tt.claim, tt.key, tt.opts...)
			if err == nil || fn != nil {
				t.Fatalf("JWT accepted invalid configuration")
			}
			if !strings.HasPrefix(err.Error(), "keyfuncs: ") {
				t.Fatalf("error %q lacks the package prefix", err)
			}
		})
	}
}

// The secret is copied: changing the caller's slice afterwards changes nothing.
func TestJWTSecretCopied(t *testing.T) {
	k := keys(t)
	secret := append([]byte(nil), k.secret...)
	fn := mustJWT(t, "sub", keyfuncs.HMACSecret(secret))
	for i := range secret {
		secret[i] = 'x'
	}
	tok := sign(t, jwt.SigningMethodHS256, k.secret, claims("alice"))
	checkKey(t, fn, newRequest("192.0.2.1:1", bearer(tok)), ok, "alice")
}

func TestJWTConcurrent(t *testing.T) {
	k := keys(t)
	fn := mustJWT(t, "sub", keyfuncs.PublicKeys(&k.ec256.PublicKey, k.ed.Public()))
	toks := []string{
		sign(t, jwt.SigningMethodES256, k.ec256, claims("alice")),
		sign(t, jwt.SigningMethodEdDSA, k.ed, claims("bob")),
	}
	want := []string{"alice", "bob"}
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				r := httptest.NewRequest("GET", "/", nil)
				r.Header.Set("Authorization", "Bearer "+toks[(g+i)%2])
				if got, err := fn(r); err != nil || got != want[(g+i)%2] {
					t.Errorf("got %q, %v", got, err)
					return
				}
			}
		}(g)
	}
	wg.Wait()
}

// A claim is keyed with its type (issue 29, item 5): "sub": "42" and
// "sub": 42 are two identities an issuer may give two users, and keyed
// alike they shared one bucket. The encoding is injective: a number is "#"
// and its text, a string starting with "#" gets another.
func TestJWTClaimKeyedByType(t *testing.T) {
	k := keys(t)
	fn := mustJWT(t, "sub", keyfuncs.HMACSecret(k.secret))
	keyOf := func(sub any) string {
		t.Helper()
		got, err := fn(newRequest("192.0.2.1:1", bearer(sign(t, jwt.SigningMethodHS256, k.secret, claims(sub)))))
		if err != nil {
			t.Fatalf("sub %#v: %v", sub, err)
		}
		return got
	}
	seen := map[string]any{}
	for _, sub := range []any{"42", 42, "#42", "##42", 4.5, "#4.5", "4.5", json.Number("-1"), "#-1", "-1", "alice", "#alice", "##alice"} {
		got := keyOf(sub)
		if prev, dup := seen[got]; dup {
			t.Errorf("sub %#v and %#v share key %q", prev, sub, got)
		}
		seen[got] = sub
	}
	if got := keyOf("alice"); got != "alice" {
		t.Errorf(`string claim "alice" keyed %q, want it as is`, got)
	}
}
