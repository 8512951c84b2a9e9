package keyfuncs_test

import (
	"encoding/base64"
	"encoding/hex"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/golang-jwt/jwt/v5"
	"github.com/sluicehq/sluice/keyfuncs"
)

// A secret shorter than its algorithm's hash, or visibly guessable, is
// refused when the KeyFunc is built (issue 20: HMACSecret accepted 32
// bytes of 'a').
func TestHMACSecretRefusesWeak(t *testing.T) {
	good32 := []byte("q7T-vZ2mK9xLr4Wc8NbY1fHs6JdA0pGe")
	good64 := append(append([]byte(nil), good32...), "_u3oXiBk5ElCnRyMw-tQ8aVjSh2zDgUF"...)
	weak := map[string]keyfuncs.JWTKey{
		"31 bytes":               keyfuncs.HMACSecret(good32[:31]),
		"32 bytes of 'a'":        keyfuncs.HMACSecret([]byte(strings.Repeat("a", 32))),
		"64 bytes of 0":          keyfuncs.HMACSecret(make([]byte, 64)),
		"two bytes alternating":  keyfuncs.HMACSecret([]byte(strings.Repeat("ab", 16))),
		"a word repeated":        keyfuncs.HMACSecret([]byte(strings.Repeat("password", 4))),
		"hex digits twice":       keyfuncs.HMACSecret([]byte("0123456789abcdef0123456789abcdef")),
		"a pattern, cut short":   keyfuncs.HMACSecret([]byte(strings.Repeat("s3cr3t-K3y!", 4)[:40])),
		"the alphabet":           keyfuncs.HMACSecret([]byte("abcdefghijklmnopqrstuvwxyzABCDEF")),
		"one byte dominating":    keyfuncs.HMACSecret([]byte(strings.Repeat("x", 20) + "Q7t-vZ2mK9xL")),
		"one weak secret of two": keyfuncs.HMACSecret(good32, []byte(strings.Repeat("a", 32))),
	}
	for name, key := range weak {
		_, err := keyfuncs.JWT("sub", key)
		if !errors.Is(err, keyfuncs.ErrWeakSecret) || !strings.HasPrefix(err.Error(), "keyfuncs: weak HMAC secret: secret ") {
			t.Errorf("%s: error %v, want one wrapping ErrWeakSecret naming the secret", name, err)
		}
	}
	for name, key := range map[string]keyfuncs.JWTKey{
		"32 bytes":        keyfuncs.HMACSecret(good32),
		"48 bytes":        keyfuncs.HMACSecret(good64[:48]),
		"64 bytes":        keyfuncs.HMACSecret(good64),
		"UUID text":       keyfuncs.HMACSecret([]byte("550e8400-e29b-41d4-a716-446655440000")),
		"a passphrase":    keyfuncs.HMACSecret([]byte("plinth quagmire vortex obelisk zephyr")),
		"hex of 16 bytes": keyfuncs.HMACSecret([]byte("7f3a9c21e08b4d56a1c7e92f30b85d4c")),
	} {
		if _, err := keyfuncs.JWT("sub", key); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// Random secrets, and their hex and base64 text, are never taken for weak
// ones.
func TestHMACSecretAcceptsRandom(t *testing.T) {
	rng := rand.New(rand.NewChaCha8([32]byte{20}))
	for i := 0; i < 3000; i++ {
		raw := make([]byte, 16+i%49)
		for j := range raw {
			raw[j] = byte(rng.Uint32())
		}
		for _, s := range [][]byte{raw, []byte(hex.EncodeToString(raw)), []byte(base64.RawURLEncoding.EncodeToString(raw))} {
			if len(s) < 32 {
				continue
			}
			if _, err := keyfuncs.JWT("sub", keyfuncs.HMACSecret(s)); err != nil {
				t.Fatalf("%q: %v", s, err)
			}
		}
	}
}

// An algorithm is verified only with secrets as long as its hash: an HS512
// token meets no 32-byte secret, and says why.
func TestHMACSecretPerAlgorithm(t *testing.T) {
	good32 := []byte("q7T-vZ2mK9xLr4Wc8NbY1fHs6JdA0pGe")
	fn := mustJWT(t, "sub", keyfuncs.HMACSecret(good32))
	checkKey(t, fn, newRequest("192.0.2.1:1", bearer(sign(t, jwt.SigningMethodHS256, good32, claims("alice")))), ok, "alice")
	for _, m := range []jwt.SigningMethod{jwt.SigningMethodHS384, jwt.SigningMethodHS512} {
		_, err := fn(newRequest("192.0.2.1:1", bearer(sign(t, m, good32, claims("alice")))))
		if !errors.Is(err, keyfuncs.ErrInvalidToken) || !errors.Is(err, keyfuncs.ErrWeakSecret) {
			t.Errorf("%s token under a 32-byte secret: %v, want ErrInvalidToken and ErrWeakSecret", m.Alg(), err)
		}
	}
	// KeyLookup pins one algorithm.
	k := keys(t)
	only := mustJWT(t, "sub", keyfuncs.KeyLookup(func(*jwt.Token) (any, error) { return k.secret, nil }, "HS512"))
	checkKey(t, only, newRequest("192.0.2.1:1", bearer(sign(t, jwt.SigningMethodHS512, k.secret, claims("bob")))), ok, "bob")
	checkKey(t, only, newRequest("192.0.2.1:1", bearer(sign(t, jwt.SigningMethodHS256, k.secret, claims("bob")))), badData, "")
}

// KeyLookup checks the HMAC secrets its function returns, on each token.
func TestKeyLookupRefusesWeakSecret(t *testing.T) {
	weak := []byte(strings.Repeat("a", 64))
	for name, lookup := range map[string]jwt.Keyfunc{
		"[]byte": func(*jwt.Token) (any, error) { return weak, nil },
		"set": func(*jwt.Token) (any, error) {
			return jwt.VerificationKeySet{Keys: []jwt.VerificationKey{keys(t).secret, weak}}, nil
		},
	} {
		fn := mustJWT(t, "sub", keyfuncs.KeyLookup(lookup, "HS256"))
		_, err := fn(newRequest("192.0.2.1:1", bearer(sign(t, jwt.SigningMethodHS256, weak, claims("alice")))))
		if !errors.Is(err, keyfuncs.ErrInvalidToken) || !errors.Is(err, keyfuncs.ErrWeakSecret) {
			t.Errorf("%s: %v, want ErrInvalidToken and ErrWeakSecret", name, err)
		}
	}
	short := mustJWT(t, "sub", keyfuncs.KeyLookup(func(*jwt.Token) (any, error) { return keys(t).secret[:40], nil }, "HS384"))
	_, err := short(newRequest("192.0.2.1:1", bearer(sign(t, jwt.SigningMethodHS384, keys(t).secret[:40], claims("alice")))))
	if !errors.Is(err, keyfuncs.ErrWeakSecret) {
		t.Errorf("40-byte HS384 secret: %v, want ErrWeakSecret", err)
	}
	good := mustJWT(t, "sub", keyfuncs.KeyLookup(func(*jwt.Token) (any, error) { return keys(t).secret, nil }, "HS256"))
	checkKey(t, good, newRequest("192.0.2.1:1", bearer(sign(t, jwt.SigningMethodHS256, keys(t).secret, claims("alice")))), ok, "alice")
}

// Samples and placeholders people paste as secrets are refused (issue 29,
// item 5: each of the first three passed, being long enough, varied enough
// and without a short period): they are read as common words, runs of
// consecutive characters, repeats, years and separators, and cost far
// fewer guesses than a random secret.
func TestHMACSecretRefusesSamples(t *testing.T) {
	for _, s := range []string{
		"your-256-bit-secret-your-256-bit", // jwt.io's sample, padded to 32 bytes
		"password1234567890password123456",
		"CHANGE_ME_IN_PRODUCTION_12345678",
		"correct horse battery staple 1987", // xkcd 936
		"SuperSecretKeyForJWTSigning12345",
		"my-super-secret-jwt-key-for-dev-2024",
		"this-is-a-placeholder-secret-change-me",
		"s3cr3t-k3y-f0r-t3st1ng-purp0s3s-0nly",
		"your-512-bit-secret-your-512-bit-secret-your-512-bit-secret-your", // HS512's sample
	} {
		_, err := keyfuncs.JWT("sub", keyfuncs.HMACSecret([]byte(s)))
		if !errors.Is(err, keyfuncs.ErrWeakSecret) {
			t.Errorf("%q: %v, want ErrWeakSecret", s, err)
		}
	}
	// KeyLookup's secrets are checked alike, on every token (the verdict
	// is remembered).
	sample := []byte("your-256-bit-secret-your-256-bit")
	fn := mustJWT(t, "sub", keyfuncs.KeyLookup(func(*jwt.Token) (any, error) { return sample, nil }, "HS256"))
	for range 2 {
		_, err := fn(newRequest("192.0.2.1:1", bearer(sign(t, jwt.SigningMethodHS256, sample, claims("alice")))))
		if !errors.Is(err, keyfuncs.ErrInvalidToken) || !errors.Is(err, keyfuncs.ErrWeakSecret) {
			t.Errorf("KeyLookup returning jwt.io's sample: %v, want ErrInvalidToken and ErrWeakSecret", err)
		}
	}
}
