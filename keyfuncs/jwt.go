package keyfuncs

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/sluicehq/sluice/core"
)

// ErrInvalidToken is wrapped by the error of a JWT KeyFunc when a request
// carries a token that fails verification: longer than the maximum length
// (see WithTokenMaxLength), malformed, forged or wrongly signed, signed
// with an algorithm the key does not allow, expired, not yet valid, or with
// the wrong issuer or audience. The error also wraps the golang-jwt error
// (jwt.ErrTokenExpired, jwt.ErrTokenSignatureInvalid, ...) when golang-jwt
// found the fault.
// It never wraps core.ErrNoKey: a request with no token is anonymous, a
// request with a bad token is suspect, and a Limiter may treat them apart.
var ErrInvalidToken = errors.New("keyfuncs: invalid token")

// defaultTokenMaxLength is the longest token, in bytes, that JWT parses
// unless WithTokenMaxLength says otherwise. Tokens seen in practice are
// well under 4 KiB; a longer one is refused before any decoding, so that a
// forged megabyte token costs its sender more than it costs the server.
const defaultTokenMaxLength = 8192

// Minimum key sizes JWT accepts.
const (
	minHMACSecretBytes = 32   // RFC 7518 §3.2: the HS256 hash size (48 for HS384, 64 for HS512)
	minRSABits         = 2048 // RFC 7518 §3.3
)

// ErrWeakSecret is wrapped by the error for an HMAC secret that JWT refuses:
// shorter than the hash size of the algorithm it verifies (RFC 7518 §3.2:
// 32 bytes for HS256, 48 for HS384, 64 for HS512), or of visibly low
// entropy (see HMACSecret). Anyone who guesses the secret, offline from
// any one token, can forge every identity.
var ErrWeakSecret = errors.New("keyfuncs: weak HMAC secret")

// hmacMinBytes is the hash size of each HMAC algorithm, the least secret
// length RFC 7518 §3.2 allows with it.
var hmacMinBytes = map[string]int{"HS256": 32, "HS384": 48, "HS512": 64}

// JWTKey is the key material a JWT KeyFunc verifies signatures with, and
// with it the signature algorithms it accepts: only those that fit the key,
// so that "alg": "none" and algorithm confusion (an HS256 token "signed"
// with an RSA public key's bytes) fail. Build one with HMACSecret,
// PublicKeys or KeyLookup; the zero JWTKey is invalid.
type JWTKey struct {
	methods []string
	keyfunc jwt.Keyfunc
	err     error
}

// HMACSecret returns a JWTKey for tokens signed with HS256, HS384 or HS512
// under one of secrets (several allow rotation; each is tried in turn).
// Each algorithm is verified only with the secrets at least as long as its
// hash (32 bytes for HS256, 48 for HS384, 64 for HS512, RFC 7518 §3.2): an
// HS512 token meets no 32-byte secret and fails with an error wrapping
// ErrInvalidToken and ErrWeakSecret. To accept one algorithm only, use
// KeyLookup with that algorithm.
//
// JWT refuses, with an error wrapping ErrWeakSecret, a secret shorter than
// 32 bytes or of visibly low entropy: fewer than 8 distinct byte values,
// one byte value making up more than half of it, a repeated pattern
// ("abcabc…", even cut short), mostly a run of evenly spaced bytes
// ("abcdef…"), or one found in fewer than 2^100 guesses by an attacker who
// reads it as common words of secrets and placeholders, runs ("123456"),
// repeats, years and separators, in the manner of zxcvbn: jwt.io's sample
// "your-256-bit-secret" padded to 32 bytes takes about 2^51,
// "CHANGE_ME_IN_PRODUCTION_12345678" 2^61. A short or guessable secret can
// be found offline from any one token, after which anyone can forge
// identities; generate it with crypto/rand (the hex or base64 text of 16
// random bytes or more passes). The secrets are copied.
func HMACSecret(secrets ...[]byte) JWTKey {
	return hmacKey(secrets, minHMACSecretBytes, "HS256", "HS384", "HS512")
}

// hmacKey checks and copies secrets, each at least minLen bytes, and
// registers each for the algorithms among algs whose hash size it meets.
func hmacKey(secrets [][]byte, minLen int, algs ...string) JWTKey {
	if len(secrets) == 0 {
		return JWTKey{err: errors.New("keyfuncs: HMACSecret needs a secret")}
	}
	byMethod := map[string][]jwt.VerificationKey{}
	for i, s := range secrets {
		if why := secretFault(s, minLen); why != "" {
			return JWTKey{err: fmt.Errorf("%w: secret %d: %s", ErrWeakSecret, i, why)}
		}
		c := append([]byte(nil), s...)
		for _, alg := range algs {
			if len(c) >= hmacMinBytes[alg] {
				byMethod[alg] = append(byMethod[alg], c)
			}
		}
	}
	return JWTKey{methods: algs, keyfunc: staticKeys(byMethod)}
}

// PublicKeys returns a JWTKey for tokens signed with one of the private keys
// matching keys (several allow rotation). Each key's type decides the
// algorithms accepted with it:
//
//	*rsa.PublicKey (at least 2048 bits)   RS256, RS384, RS512, PS256, PS384, PS512
//	*ecdsa.PublicKey on P-256/P-384/P-521 ES256 / ES384 / ES512 respectively
//	ed25519.PublicKey                     EdDSA
//
// Any other type (a private key, a []byte secret) is an error, reported by
// JWT.
func PublicKeys(keys ...crypto.PublicKey) JWTKey {
	if len(keys) == 0 {
		return JWTKey{err: errors.New("keyfuncs: PublicKeys needs a key")}
	}
	byMethod := map[string][]jwt.VerificationKey{}
	for i, k := range keys {
		var methods []string
		switch k := k.(type) {
		case *rsa.PublicKey:
			if k == nil || k.N == nil {
				return JWTKey{err: fmt.Errorf("keyfuncs: public key %d: nil RSA key", i)}
			}
			if k.N.BitLen() < minRSABits {
				return JWTKey{err: fmt.Errorf("keyfuncs: public key %d: RSA key of %d bits, want at least %d", i, k.N.BitLen(), minRSABits)}
			}
			methods = []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512"}
		case *ecdsa.PublicKey:
			if k == nil || k.Curve == nil {
				return JWTKey{err: fmt.Errorf("keyfuncs: public key %d: nil ECDSA key", i)}
			}
			switch k.Curve.Params().Name {
			case "P-256":
				methods = []string{"ES256"}
			case "P-384":
				methods = []string{"ES384"}
			case "P-521":
				methods = []string{"ES512"}
			default:
				return JWTKey{err: fmt.Errorf("keyfuncs: public key %d: ECDSA curve %s has no JWT algorithm", i, k.Curve.Params().Name)}
			}
		case ed25519.PublicKey:
			if len(k) != ed25519.PublicKeySize {
				return JWTKey{err: fmt.Errorf("keyfuncs: public key %d: Ed25519 key of %d bytes, want %d", i, len(k), ed25519.PublicKeySize)}
			}
			methods = []string{"EdDSA"}
		case *rsa.PrivateKey, *ecdsa.PrivateKey, ed25519.PrivateKey:
			return JWTKey{err: fmt.Errorf("keyfuncs: public key %d is a private key (%T): pass its Public()", i, k)}
		case []byte:
			return JWTKey{err: fmt.Errorf("keyfuncs: public key %d is a []byte: use HMACSecret for shared secrets", i)}
		default:
			return JWTKey{err: fmt.Errorf("keyfuncs: public key %d has unsupported type %T", i, k)}
		}
		for _, m := range methods {
			byMethod[m] = append(byMethod[m], k)
		}
	}
	methods := make([]string, 0, len(byMethod))
	for _, m := range []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"} {
		if len(byMethod[m]) > 0 {
			methods = append(methods, m)
		}
	}
	return JWTKey{methods: methods, keyfunc: staticKeys(byMethod)}
}

// KeyLookup returns a JWTKey that asks fn for the key of each token (for
// instance by its "kid" header, from a JWKS), accepting only the named
// algorithms. algorithms is required: fn sees the token before its
// signature is checked, so the accepted algorithms must not depend on it.
// "none" is refused, and so is mixing HMAC algorithms with public-key ones,
// which is what algorithm-confusion attacks exploit. An HMAC secret fn
// returns is checked as HMACSecret checks its secrets, against the hash
// size of the token's algorithm, on every token: a weak one fails the
// token with an error wrapping ErrInvalidToken and ErrWeakSecret.
func KeyLookup(fn jwt.Keyfunc, algorithms ...string) JWTKey {
	if fn == nil {
		return JWTKey{err: errors.New("keyfuncs: KeyLookup needs a jwt.Keyfunc")}
	}
	if len(algorithms) == 0 {
		return JWTKey{err: errors.New("keyfuncs: KeyLookup needs the accepted algorithms")}
	}
	hmac, public := false, false
	for _, a := range algorithms {
		m := jwt.GetSigningMethod(a)
		if m == nil || a == "none" {
			return JWTKey{err: fmt.Errorf("keyfuncs: unsupported JWT algorithm %q", a)}
		}
		if _, ok := m.(*jwt.SigningMethodHMAC); ok {
			hmac = true
		} else {
			public = true
		}
	}
	if hmac && public {
		return JWTKey{err: errors.New("keyfuncs: KeyLookup cannot mix HMAC and public-key algorithms")}
	}
	if hmac {
		fn = checkedSecrets(fn)
	}
	return JWTKey{methods: append([]string(nil), algorithms...), keyfunc: fn}
}

// checkedSecrets wraps fn so that an HMAC secret it returns (a []byte, or
// one in a jwt.VerificationKeySet) that HMACSecret would refuse for the
// token's algorithm fails the token with an error wrapping ErrWeakSecret.
func checkedSecrets(fn jwt.Keyfunc) jwt.Keyfunc {
	verdicts := new(verdictCache)
	return func(t *jwt.Token) (any, error) {
		k, err := fn(t)
		if err != nil {
			return k, err
		}
		keys := []any{k}
		if set, ok := k.(jwt.VerificationKeySet); ok {
			keys = nil
			for _, vk := range set.Keys {
				keys = append(keys, vk)
			}
		}
		for _, vk := range keys {
			if b, ok := vk.([]byte); ok {
				if why := verdicts.fault(b, hmacMinBytes[t.Method.Alg()]); why != "" {
					return nil, fmt.Errorf("%w: key lookup for %s: %s", ErrWeakSecret, t.Method.Alg(), why)
				}
			}
		}
		return k, nil
	}
}

// staticKeys returns a jwt.Keyfunc serving the keys registered for the
// token's algorithm.
func staticKeys(byMethod map[string][]jwt.VerificationKey) jwt.Keyfunc {
	return func(t *jwt.Token) (any, error) {
		keys := byMethod[t.Method.Alg()]
		switch len(keys) {
		case 0:
			if n, ok := hmacMinBytes[t.Method.Alg()]; ok {
				return nil, fmt.Errorf("%w: %s needs a secret of at least %d bytes, and none is that long", ErrWeakSecret, t.Method.Alg(), n)
			}
			return nil, fmt.Errorf("no key for algorithm %s", t.Method.Alg())
		case 1:
			return keys[0], nil
		default:
			return jwt.VerificationKeySet{Keys: keys}, nil
		}
	}
}

// JWTOption configures JWT.
type JWTOption interface{ apply(*jwtConfig) }

// jwtOptionFunc adapts a function to JWTOption.
type jwtOptionFunc func(*jwtConfig)

func (f jwtOptionFunc) apply(c *jwtConfig) { f(c) }

type tokenSource int

const (
	fromAuthorization tokenSource = iota
	fromHeader
	fromCookie
)

type jwtConfig struct {
	sources        int
	source         tokenSource
	name           string
	issuer         string
	audience       []string
	leeway         time.Duration
	optionalExpiry bool
	now            func() time.Time
	maxLength      int
}

// WithTokenHeader reads the token from the header name instead of
// "Authorization: Bearer". The value is the token, optionally after a
// "Bearer " scheme.
func WithTokenHeader(name string) JWTOption {
	return jwtOptionFunc(func(c *jwtConfig) { c.sources++; c.source, c.name = fromHeader, name })
}

// WithTokenCookie reads the token from the cookie name instead of
// "Authorization: Bearer".
func WithTokenCookie(name string) JWTOption {
	return jwtOptionFunc(func(c *jwtConfig) { c.sources++; c.source, c.name = fromCookie, name })
}

// WithTokenMaxLength sets the longest token, in bytes, that JWT accepts
// (n > 0); a longer one is an error wrapping ErrInvalidToken, found before
// any base64, JSON or signature work. The default is 8192: tokens seen in
// practice are well under 4 KiB.
// As WithMaxLength does for Header, the bound keeps the cost of a request
// small whatever a client sends.
func WithTokenMaxLength(n int) JWTOption {
	return jwtOptionFunc(func(c *jwtConfig) { c.maxLength = n })
}

// WithIssuer requires the "iss" claim to equal iss. An empty iss requires
// nothing.
func WithIssuer(iss string) JWTOption {
	return jwtOptionFunc(func(c *jwtConfig) { c.issuer = iss })
}

// WithAudience requires the "aud" claim to contain at least one of aud.
// Without any aud it requires nothing; repeated options add up.
func WithAudience(aud ...string) JWTOption {
	aud = append([]string(nil), aud...)
	return jwtOptionFunc(func(c *jwtConfig) { c.audience = append(c.audience, aud...) })
}

// WithLeeway tolerates clock skew of up to d (0 ≤ d ≤ 5 minutes) when
// checking "exp", "nbf" and "iat". The default is none.
func WithLeeway(d time.Duration) JWTOption {
	return jwtOptionFunc(func(c *jwtConfig) { c.leeway = d })
}

// WithOptionalExpiration accepts tokens without an "exp" claim, which JWT
// refuses by default: a token that never expires is an identity that can
// never be revoked. "exp" is still checked when present.
func WithOptionalExpiration() JWTOption {
	return jwtOptionFunc(func(c *jwtConfig) { c.optionalExpiry = true })
}

// WithClock sets the clock used to check "exp", "nbf" and "iat"; the
// default is time.Now. For tests.
func WithClock(now func() time.Time) JWTOption {
	return jwtOptionFunc(func(c *jwtConfig) { c.now = now })
}

// maxLeeway bounds WithLeeway.
const maxLeeway = 5 * time.Minute

// JWT returns a KeyFunc that keys requests by the claim named claim (for
// instance "sub") of a verified JSON Web Token, taken by default from an
// "Authorization: Bearer <token>" header (see WithTokenHeader and
// WithTokenCookie).
//
// The token is trusted only once verified: its signature under key, with an
// algorithm that key allows; "exp" required (see WithOptionalExpiration) and
// in the future; "nbf" and "iat", when present, not in the future; issuer
// and audience when WithIssuer or WithAudience ask for them. A string claim
// is the key as is, a leading "#" doubled; a number is "#" and its JSON
// text ("#42"): so "sub": "42" and "sub": 42, two identities an issuer may
// give two users, never share a key.
//
// Errors tell three cases apart:
//   - no token (no Authorization header, another scheme, no cookie), or a
//     valid token whose claim is missing, null or empty: an error wrapping
//     core.ErrNoKey, an anonymous request;
//   - a token that fails verification, or is longer than the maximum
//     length: an error wrapping ErrInvalidToken (and the golang-jwt cause,
//     if any), never core.ErrNoKey;
//   - a valid token whose claim is neither a string nor a number, or a
//     header sent on several lines: another error.
//
// In Fallback, any error moves on to the next source: a forged token then
// earns its sender the limit of, say, its IP address, never somebody
// else's.
//
// JWT returns an error for an invalid key, an empty claim name or invalid
// options (a maximum token length ≤ 0 among them). The returned KeyFunc is safe for concurrent use.
func JWT(claim string, key JWTKey, opts ...JWTOption) (core.KeyFunc, error) {
	if claim == "" {
		return nil, errors.New("keyfuncs: JWT needs a claim name")
	}
	if key.err != nil {
		return nil, key.err
	}
	if key.keyfunc == nil {
		return nil, errors.New("keyfuncs: JWT needs a key (HMACSecret, PublicKeys or KeyLookup)")
	}
	cfg := jwtConfig{maxLength: defaultTokenMaxLength}
	for _, opt := range opts {
		if opt != nil {
			opt.apply(&cfg)
		}
	}
	if err := cfg.check(); err != nil {
		return nil, err
	}
	popts := []jwt.ParserOption{
		jwt.WithValidMethods(key.methods),
		jwt.WithIssuedAt(),
		jwt.WithJSONNumber(),
		jwt.WithLeeway(cfg.leeway),
	}
	if !cfg.optionalExpiry {
		popts = append(popts, jwt.WithExpirationRequired())
	}
	if cfg.issuer != "" {
		popts = append(popts, jwt.WithIssuer(cfg.issuer))
	}
	if len(cfg.audience) > 0 {
		popts = append(popts, jwt.WithAudience(cfg.audience...))
	}
	if cfg.now != nil {
		popts = append(popts, jwt.WithTimeFunc(cfg.now))
	}
	v := &jwtKeyer{
		claim:   claim,
		parser:  jwt.NewParser(popts...),
		keyfunc: key.keyfunc,
		source:  cfg.source,
		name:    cfg.name,
		maxLen:  cfg.maxLength,
	}
	return v.key, nil
}

// check validates c and canonicalizes its header name.
func (c *jwtConfig) check() error {
	if c.sources > 1 {
		return errors.New("keyfuncs: give at most one of WithTokenHeader, WithTokenCookie")
	}
	switch c.source {
	case fromHeader:
		if !validHeaderName(c.name) {
			return fmt.Errorf("keyfuncs: invalid token header name %q", c.name)
		}
		c.name = http.CanonicalHeaderKey(c.name)
	case fromCookie:
		if !validHeaderName(c.name) { // cookie names are tokens too
			return fmt.Errorf("keyfuncs: invalid token cookie name %q", c.name)
		}
	}
	if c.leeway < 0 || c.leeway > maxLeeway {
		return fmt.Errorf("keyfuncs: leeway %v out of range (0..%v)", c.leeway, maxLeeway)
	}
	if c.maxLength <= 0 {
		return fmt.Errorf("keyfuncs: token max length %d, want > 0", c.maxLength)
	}
	return nil
}

// jwtKeyer holds one JWT KeyFunc's configuration; immutable after JWT
// returns. jwt.Parser is safe for concurrent use once built.
type jwtKeyer struct {
	claim   string
	parser  *jwt.Parser
	keyfunc jwt.Keyfunc
	source  tokenSource
	name    string
	maxLen  int
}

func (v *jwtKeyer) key(r *http.Request) (string, error) {
	if r == nil {
		return "", errNilRequest
	}
	raw, err := v.token(r)
	if err != nil {
		return "", err
	}
	if len(raw) > v.maxLen {
		return "", fmt.Errorf("%w: token of %d bytes exceeds the maximum of %d", ErrInvalidToken, len(raw), v.maxLen)
	}
	claims := jwt.MapClaims{}
	if _, err := v.parser.ParseWithClaims(raw, claims, v.keyfunc); err != nil {
		return "", fmt.Errorf("%w: %w", ErrInvalidToken, err)
	}
	switch c := claims[v.claim].(type) {
	case nil:
		return "", fmt.Errorf("keyfuncs: token has no %q claim: %w", v.claim, core.ErrNoKey)
	case string:
		if c == "" {
			return "", fmt.Errorf("keyfuncs: token has an empty %q claim: %w", v.claim, core.ErrNoKey)
		}
		if c[0] == numberMark {
			return string(numberMark) + c, nil
		}
		return c, nil
	case json.Number:
		return string(numberMark) + c.String(), nil
	default:
		return "", fmt.Errorf("keyfuncs: token claim %q is a %s, want a string or a number", v.claim, jsonKind(c))
	}
}

// token extracts the raw token from r.
func (v *jwtKeyer) token(r *http.Request) (string, error) {
	switch v.source {
	case fromCookie:
		c, err := r.Cookie(v.name)
		if err != nil || c.Value == "" {
			return "", fmt.Errorf("keyfuncs: no %s cookie: %w", v.name, core.ErrNoKey)
		}
		return c.Value, nil
	case fromHeader:
		values := r.Header.Values(v.name)
		switch {
		case len(values) == 0 || len(values) == 1 && values[0] == "":
			return "", fmt.Errorf("keyfuncs: no %s header: %w", v.name, core.ErrNoKey)
		case len(values) > 1:
			return "", fmt.Errorf("keyfuncs: %s: %d header lines, want one", v.name, len(values))
		}
		tok := values[0]
		if scheme, rest, ok := strings.Cut(tok, " "); ok && strings.EqualFold(scheme, "Bearer") {
			tok = trimOWS(rest)
		}
		if tok == "" {
			return "", fmt.Errorf("keyfuncs: empty token in %s: %w", v.name, core.ErrNoKey)
		}
		return tok, nil
	default:
		values := r.Header.Values("Authorization")
		if len(values) > 1 {
			return "", fmt.Errorf("keyfuncs: Authorization: %d header lines, want one", len(values))
		}
		if len(values) == 0 {
			return "", fmt.Errorf("keyfuncs: no Authorization header: %w", core.ErrNoKey)
		}
		scheme, rest, _ := strings.Cut(values[0], " ")
		if !strings.EqualFold(scheme, "Bearer") {
			return "", fmt.Errorf("keyfuncs: no Bearer token in Authorization: %w", core.ErrNoKey)
		}
		tok := trimOWS(rest)
		if tok == "" {
			return "", fmt.Errorf("keyfuncs: empty Bearer token: %w", core.ErrNoKey)
		}
		return tok, nil
	}
}

// numberMark starts the key of a number claim, and is doubled at the start
// of a string claim's, so that the two types never share a key.
const numberMark = '#'

func jsonKind(v any) string {
	switch v.(type) {
	case bool:
		return "boolean"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	default:
		return fmt.Sprintf("%T", v)
	}
}
