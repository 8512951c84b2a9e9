// Package keyfuncs provides the usual core.KeyFunc implementations: they
// tell a Limiter who is making a request, so that requests with the same key
// share one allowance.
//
//   - IP keys by client address: the connection's peer, or, behind proxies
//     declared with WithTrustedProxies (on a Unix socket: "unix:"), the
//     address those proxies report in X-Forwarded-For, Forwarded or a
//     single-address header, read from the right. IPv6 clients are grouped
//     by /56 by default (WithIPv6Prefix), IPv4 clients in IPv6 form (6to4,
//     Teredo, NAT64, SIIT) by the IPv4 address they embed.
//   - Header keys by the value of a request header, such as an API key.
//   - Route keys by the route template ("GET /users/{id}") from r.Pattern,
//     never by the raw path.
//   - JWT keys by a claim of a JSON Web Token whose signature, algorithm and
//     expiry it has verified.
//   - Join combines keys (per user per route) and Fallback picks the first
//     source that identifies the request (user, else IP), both with
//     encodings that cannot collide.
//
// # Trust
//
// A key must not be something the client can choose freely, or a client
// could take a fresh allowance on every request or spend somebody else's.
// So IP ignores every forwarding header unless the peer is a trusted proxy,
// and JWT ignores a token it cannot verify. Header is the exception: use it
// for values checked elsewhere (an API key your handler validates) or where
// a client picking its key does no harm.
//
// # Cheap checks first
//
// JWT verifies a signature on every request before the Limiter can count
// it, whoever sends it, even from an address already over its limit. A
// forged token just under the 8 KiB bound cost 110 to 165 µs of CPU with
// HS256, 190 to 320 µs with RS256, 230 to 290 µs with ES256, 250 to 370
// µs with EdDSA and 3.9 to 5.5 ms with ES512 (a 200-byte HS256 token 15 to
// 19 µs; a 1 MiB one, refused by its length, 1 µs), measured with
//
//	go test -run '^$' -bench BenchmarkJWTForgedToken -benchtime 2s ./keyfuncs/
//
// on a shared 2-core AMD EPYC at a load average of 5 to 7; the figures
// move with the machine and its load, so measure yours. IP costs under a
// microsecond (BenchmarkIPForwardingPrefix). So limit by
// IP first, with a Limiter of its own whose middleware wraps the one keyed
// by the token (stacked Limiters): a client over its address's allowance
// is refused before any of its tokens is verified (see the example
// ipLimitBeforeJWT). Give the IP limit the headroom of the busiest honest
// address (an office behind one NAT), and the token limit the per-user
// figure.
//
// # Errors
//
// A KeyFunc returns an error when it cannot identify the request; the
// Limiter then applies its key-error rule, it never skips limiting. The
// error wraps core.ErrNoKey when nothing is wrong but the request carries no
// identity of that kind (no header, no token, no route). Any other error
// means the identity is present but unusable or suspect: malformed
// addresses from a trusted proxy, an ambiguous repeated header, or a token
// failing verification (which wraps ErrInvalidToken). Test with errors.Is.
// Error texts may quote request data (cut short); log them, never send them
// to clients.
//
// # Concurrency
//
// Constructors validate their arguments once and return an error (or, for
// Join and Fallback, a KeyFunc that fails) on bad configuration, never a
// panic. Every KeyFunc returned is immutable and safe for concurrent use by
// any number of goroutines.
package keyfuncs
