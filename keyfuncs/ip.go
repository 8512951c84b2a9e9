package keyfuncs

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strings"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/clientaddr"
)

// Default groups: IPv4 clients by address, IPv6 clients by /56 (see
// WithIPv6Prefix for why). The Limiter's per-address buckets for requests
// without a key group peers alike (internal/clientaddr).
const (
	defaultIPv4Bits = 32
	defaultIPv6Bits = clientaddr.IPv6Bits
)

// IPOption configures IP.
type IPOption interface{ apply(*ipConfig) }

// ipOptionFunc adapts a function to IPOption.
type ipOptionFunc func(*ipConfig)

func (f ipOptionFunc) apply(c *ipConfig) { f(c) }

// proxySource says which header a trusted proxy writes the client address to.
type proxySource int

const (
	sourceXForwardedFor proxySource = iota // the default
	sourceForwarded
	sourceClientIPHeader
)

type ipConfig struct {
	proxies  []string
	headers  []string // every WithForwardingHeader name, in order
	ipv6Bits int
	ipv4Bits int
}

// WithTrustedProxies declares the proxies in front of the server, as CIDR
// prefixes ("10.0.0.0/8", "2001:db8::/32") or single addresses ("::1").
// IP reads a forwarding header only when the request's peer (RemoteAddr)
// lies inside one of them, and skips only them when walking it. The option
// may be given several times; the lists add up. IPv4-mapped prefixes
// ("::ffff:10.0.0.0/104") become IPv4 ones; an IPv6 prefix never covers
// IPv4 or IPv4-mapped addresses. A netip.Prefix p is given as p.String().
// "unix:" trusts peers on Unix sockets (a reverse proxy connecting through
// one; the spelling is nginx's): without it, such a peer, the same for
// every client, makes IP fail (see IP).
//
// Every client inside a trusted prefix can choose its key, so IP refuses,
// with an error naming the prefix: invalid text; a prefix covering every
// address of its family ("0.0.0.0/0", "::/0", "::ffff:0.0.0.0/96"); one
// covering more public addresses than a /12 (IPv4) or a /28 (IPv6), such
// as "2000::/3", "::/1" or "0.0.0.0/1"; and prefixes whose union (overlaps
// counted once) covers more public addresses than a /8 (IPv4) or a /24
// (IPv6). Public means outside the private, shared (CGNAT), loopback,
// link-local and unique local ranges, which may be trusted at any width.
// An IPv6 prefix inside a range whose addresses stand for IPv4 hosts
// (6to4, Teredo, NAT64 and SIIT prefixes, IPv4-compatible addresses; see
// IP) counts as the IPv4 space it embeds, with the IPv4 prefixes: so
// "2001::/32" (Teredo), "64:ff9b::/96" (NAT64) and "::/96" cover every
// IPv4 address and are refused like "0.0.0.0/0", and "2002:c000::/24" is
// 192.0.0.0/8. Cloudflare's and CloudFront's lists fit
// (docs/threat-model.md, threat 13).
func WithTrustedProxies(proxies ...string) IPOption {
	proxies = append([]string(nil), proxies...)
	return ipOptionFunc(func(c *ipConfig) { c.proxies = append(c.proxies, proxies...) })
}

// WithForwardingHeader names the header a trusted proxy writes the client
// address to; IP reads it, and no other, when the peer is a trusted proxy
// (WithTrustedProxies). The default is "X-Forwarded-For". Names are
// case-insensitive:
//
//   - "X-Forwarded-For": a list of addresses, each proxy appending the one
//     it received the request from.
//   - "Forwarded": the RFC 7239 header, whose for= parameters are read the
//     same way.
//   - any other name, such as nginx's "X-Real-IP" or Cloudflare's
//     "CF-Connecting-IP": a header the proxy sets to the one client
//     address, overwriting what the client sent. IP takes its value as the
//     client whatever the address, and rejects a request carrying the
//     header more than once or with a list of addresses.
//
// IP returns an error for an invalid name, for the option given twice
// with different names, and for the option without a trusted proxy.
func WithForwardingHeader(name string) IPOption {
	return ipOptionFunc(func(c *ipConfig) { c.headers = append(c.headers, name) })
}

// WithIPv6Prefix groups IPv6 clients by their first bits bits (0 < bits ≤
// 128); the default is 56: every address of one /56 shares one key. It
// never applies to IPv4 or IPv4-mapped addresses, nor to the IPv6 forms
// of IPv4 clients, which are keyed by the IPv4 address they embed (see
// IP).
//
// A /64 is the smallest network an IPv6 host gets, and it can pick any of
// its 2^64 addresses for each request; but providers delegate more to one
// customer: residential ISPs usually a /56 (256 /64s), business lines and
// tunnel brokers a /48 (65,536 /64s), as RIPE-690 recommends. Keyed by /64,
// such a customer multiplies its allowance by 256 or 65,536 (measured: 2,560
// requests over the /64s of one /56 all served against a limit of 10). /56
// is the usual residential delegation and the default of express-rate-limit
// 8. The cost: networks that give each customer a single /64 out of a shared
// /56 (mobile carriers, some hosting providers) put up to 256 customers in
// one bucket.
//
// Choose 64 when most clients are on mobile networks or hosting that hand
// out one /64 per customer, and a shared bucket would hurt more than a
// multiplied allowance; choose 48 when clients are sites with /48s, or to
// add a second, coarser limit beside the per-client one (a Limiter keyed by
// /48 stacked before one keyed by /56); 128 keys every address on its own.
func WithIPv6Prefix(bits int) IPOption {
	return ipOptionFunc(func(c *ipConfig) { c.ipv6Bits = bits })
}

// WithIPv4Prefix groups IPv4 clients by their first bits bits (0 < bits ≤
// 32). The default is 32: each address on its own.
func WithIPv4Prefix(bits int) IPOption {
	return ipOptionFunc(func(c *ipConfig) { c.ipv4Bits = bits })
}

// ipKeyer holds the validated configuration of one IP key function. It is
// never modified after IP returns, so its key method is safe for concurrent
// use.
type ipKeyer struct {
	trusted      []netip.Prefix
	trustSockets bool // unixProxies was given
	source       proxySource
	headerName   string // canonical form, for sourceClientIPHeader
	ipv6Bits     int
	ipv4Bits     int
}

// IP returns a KeyFunc, safe for concurrent use, that keys requests by
// client IP address. It fails on invalid options: a bad or too wide trusted
// prefix (see WithTrustedProxies), a prefix length out of range, or a bad
// WithForwardingHeader.
//
// The client is the connection's peer (r.RemoteAddr), and forwarding
// headers are ignored, unless the peer is a trusted proxy. Then IP reads
// one header (X-Forwarded-For, or the one WithForwardingHeader names), its
// lines merged in order, from the right: the first untrusted address is
// the client; when all of the last 32 entries are trusted, the left-most
// of them; when the header is absent, the peer. Entries left of the
// client's are never parsed: they cost nothing.
//
// The key is the client address, normalised (IPv4-mapped IPv6 becomes
// IPv4; zones, ports and brackets are dropped) and masked to its group
// (WithIPv6Prefix, WithIPv4Prefix): "2001:db8:1::/56" by default for IPv6,
// the bare address at full length ("203.0.113.7"). IPv6 addresses that
// stand for one IPv4 host are keyed as the IPv4 address they embed: 6to4
// (2002::/16, RFC 3056), Teredo (2001::/32, RFC 4380: the client's
// address), the NAT64 well-known prefix (64:ff9b::/96, RFC 6052), SIIT's
// IPv4-translated (::ffff:0:0:0/96) and the IPv4-compatible (::/96, but
// "::1") forms. In the local-use translation prefix (64:ff9b:1::/48, RFC
// 8215), where the IPv4 address sits depends on the translator's prefix
// length, each address is its own key. A translator using a prefix of your
// own network (an RFC 6052 network-specific prefix) is not recognised:
// its clients are grouped by /56. docs/threat-model.md (threats 1 and 3)
// gives the reasons.
//
// A peer on a Unix socket (RemoteAddr "@", "@name", a path, or "" on the
// BSDs) is one peer for every client, so keying by it would put them all
// in one bucket: unless WithTrustedProxies lists "unix:", IP fails with an
// error saying so (the Limiter logs the first key error), an empty
// RemoteAddr with one wrapping core.ErrNoKey. With "unix:" such a peer is
// a trusted proxy whose header must name the client: an absent or empty
// header is an error, not a shared key.
//
// A trusted proxy reporting a hidden client ("unknown", an RFC 7239
// obfuscated identifier, a Forwarded element without for=) is an error
// wrapping core.ErrNoKey; a malformed address where one is needed is
// another error.
func IP(opts ...IPOption) (core.KeyFunc, error) {
	cfg := ipConfig{ipv6Bits: defaultIPv6Bits, ipv4Bits: defaultIPv4Bits}
	for _, opt := range opts {
		if opt != nil {
			opt.apply(&cfg)
		}
	}
	k := &ipKeyer{ipv6Bits: cfg.ipv6Bits, ipv4Bits: cfg.ipv4Bits}
	if cfg.ipv6Bits <= 0 || cfg.ipv6Bits > 128 {
		return nil, fmt.Errorf("keyfuncs: IPv6 prefix length %d out of range (1..128)", cfg.ipv6Bits)
	}
	if cfg.ipv4Bits <= 0 || cfg.ipv4Bits > 32 {
		return nil, fmt.Errorf("keyfuncs: IPv4 prefix length %d out of range (1..32)", cfg.ipv4Bits)
	}
	var err error
	if k.trusted, k.trustSockets, err = trustedPrefixes(cfg); err != nil {
		return nil, err
	}
	if k.source, k.headerName, err = forwardingHeader(cfg.headers); err != nil {
		return nil, err
	}
	if len(cfg.headers) > 0 && len(k.trusted) == 0 && !k.trustSockets {
		return nil, errors.New("keyfuncs: WithForwardingHeader has no effect without WithTrustedProxies")
	}
	return k.key, nil
}

// forwardingHeader returns the source and canonical header name that the
// WithForwardingHeader names given select.
func forwardingHeader(names []string) (proxySource, string, error) {
	if len(names) == 0 {
		return sourceXForwardedFor, "", nil
	}
	name := names[0]
	if !validHeaderName(name) {
		return 0, "", fmt.Errorf("keyfuncs: invalid forwarding header name %q", name)
	}
	name = http.CanonicalHeaderKey(name)
	for _, other := range names[1:] {
		if http.CanonicalHeaderKey(other) != name {
			return 0, "", fmt.Errorf("keyfuncs: WithForwardingHeader given twice (%q, %q): a proxy writes one header", name, other)
		}
	}
	switch name {
	case "X-Forwarded-For":
		return sourceXForwardedFor, "", nil
	case "Forwarded":
		return sourceForwarded, "", nil
	}
	return sourceClientIPHeader, name, nil
}

func (k *ipKeyer) isTrusted(a netip.Addr) bool {
	for _, p := range k.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

func (k *ipKeyer) key(r *http.Request) (string, error) {
	if r == nil {
		return "", errNilRequest
	}
	a, err := k.clientAddr(r)
	if err != nil {
		return "", err
	}
	return k.keyOf(a), nil
}

// keyOf returns the key of the normalised address a.
func (k *ipKeyer) keyOf(a netip.Addr) string { return clientaddr.Key(a, k.ipv4Bits, k.ipv6Bits) }

// clientAddr finds the normalised client address of r.
func (k *ipKeyer) clientAddr(r *http.Request) (netip.Addr, error) {
	socket := clientaddr.IsSocket(r.RemoteAddr)
	switch {
	case socket && !k.trustSockets && r.RemoteAddr == "":
		return netip.Addr{}, fmt.Errorf("keyfuncs: empty RemoteAddr (a Unix socket? see WithTrustedProxies(%q)): %w", unixProxies, core.ErrNoKey)
	case socket && !k.trustSockets:
		return netip.Addr{}, fmt.Errorf("keyfuncs: peer %s is a Unix socket, the same for every client, so it cannot tell clients apart; "+
			"if a reverse proxy connects through it, trust it with WithTrustedProxies(%q) and have it send the client's address in %s",
			quoteShort(r.RemoteAddr), unixProxies, k.header())
	}
	var peer netip.Addr // invalid for a socket
	if !socket {
		var err error
		if peer, err = parseNode(r.RemoteAddr, false); err != nil {
			return netip.Addr{}, fmt.Errorf("keyfuncs: RemoteAddr: %w", err)
		}
		if !k.isTrusted(peer) {
			return peer, nil
		}
	}
	var (
		a   netip.Addr
		err error
	)
	switch k.source {
	case sourceForwarded:
		a, err = k.walkForwarded(r.Header.Values("Forwarded"), peer)
	case sourceClientIPHeader:
		a, err = k.readClientIPHeader(r.Header.Values(k.headerName), peer)
	default:
		a, err = k.walkXForwardedFor(r.Header.Values("X-Forwarded-For"), peer)
	}
	if err == nil && !a.IsValid() {
		return netip.Addr{}, fmt.Errorf("keyfuncs: the trusted Unix socket peer %s sent no client address in %s: "+
			"have the proxy send it", quoteShort(r.RemoteAddr), k.header())
	}
	return a, err
}

// header names the header k reads behind a trusted proxy.
func (k *ipKeyer) header() string {
	switch k.source {
	case sourceForwarded:
		return "Forwarded"
	case sourceClientIPHeader:
		return k.headerName
	}
	return "X-Forwarded-For"
}

// maxHops bounds the entries IP reads from the right of a forwarding
// header: list elements (empty ones included) and blank lines.
const maxHops = 32

// walkXForwardedFor walks the merged X-Forwarded-For lines from the right.
// It slices from the end instead of splitting, so a long client-written
// prefix costs nothing and is never parsed.
func (k *ipKeyer) walkXForwardedFor(lines []string, peer netip.Addr) (netip.Addr, error) {
	leftmost, hops := peer, 0
	for li := len(lines) - 1; li >= 0; li-- {
		rest := lines[li]
		if trimOWS(rest) == "" {
			rest = "," // a blank line counts as an empty element
		}
		for rest != "" {
			if hops++; hops > maxHops {
				return leftmost, nil
			}
			entry := rest
			if i := strings.LastIndexByte(rest, ','); i >= 0 {
				entry, rest = rest[i+1:], rest[:i]
			} else {
				rest = ""
			}
			entry = trimOWS(entry)
			if entry == "" {
				continue // empty list elements are ignored (RFC 9110 §5.6.1)
			}
			if strings.EqualFold(entry, "unknown") {
				return netip.Addr{}, fmt.Errorf("keyfuncs: X-Forwarded-For: client address hidden (%q): %w", entry, core.ErrNoKey)
			}
			a, err := parseNode(entry, false)
			if err != nil {
				return netip.Addr{}, fmt.Errorf("keyfuncs: X-Forwarded-For: %w", err)
			}
			if !k.isTrusted(a) {
				return a, nil
			}
			leftmost = a
		}
	}
	return leftmost, nil
}

// walkForwarded walks the for= values of the merged Forwarded lines from the
// right, parsing each line from its end (lastForwarded): elements left of
// the client's, written by the client, are never read, so they cost
// nothing and cannot make the line unparsable.
func (k *ipKeyer) walkForwarded(lines []string, peer netip.Addr) (netip.Addr, error) {
	leftmost, hops := peer, 0
	for li := len(lines) - 1; li >= 0; li-- {
		for rest := lines[li]; ; {
			e, left, ok, err := lastForwarded(rest)
			if err != nil {
				return netip.Addr{}, fmt.Errorf("keyfuncs: Forwarded: %w", err)
			}
			if !ok {
				break
			}
			if hops++; hops > maxHops {
				return leftmost, nil
			}
			rest = left
			if e.empty {
				continue
			}
			if !e.hasFor {
				return netip.Addr{}, fmt.Errorf("keyfuncs: Forwarded: element without for=: %w", core.ErrNoKey)
			}
			if strings.EqualFold(e.forValue, "unknown") || strings.HasPrefix(e.forValue, "_") {
				return netip.Addr{}, fmt.Errorf("keyfuncs: Forwarded: client address hidden (%s): %w", quoteShort(e.forValue), core.ErrNoKey)
			}
			a, err := parseNode(e.forValue, true)
			if err != nil {
				return netip.Addr{}, fmt.Errorf("keyfuncs: Forwarded: %w", err)
			}
			if !k.isTrusted(a) {
				return a, nil
			}
			leftmost = a
		}
	}
	return leftmost, nil
}

// readClientIPHeader reads a single-address header set by a trusted proxy.
func (k *ipKeyer) readClientIPHeader(values []string, peer netip.Addr) (netip.Addr, error) {
	switch len(values) {
	case 0:
		return peer, nil
	case 1:
	default:
		return netip.Addr{}, fmt.Errorf("keyfuncs: %s: %d header lines, want one", k.headerName, len(values))
	}
	v := trimOWS(values[0])
	if v == "" {
		return peer, nil
	}
	if strings.IndexByte(v, ',') >= 0 {
		return netip.Addr{}, fmt.Errorf("keyfuncs: %s: a list of addresses (%s), want one", k.headerName, quoteShort(v))
	}
	a, err := parseNode(v, false)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("keyfuncs: %s: %w", k.headerName, err)
	}
	return a, nil
}

// errBadAddress is wrapped by every address-syntax error.
var errBadAddress = errors.New("invalid address")

// parseNode parses an address as it appears in RemoteAddr, X-Forwarded-For
// or a Forwarded for= value: "192.0.2.1", "192.0.2.1:80", "2001:db8::1",
// "[2001:db8::1]", "[2001:db8::1]:443", with an optional IPv6 zone. When
// obfuscatedPort is set, an RFC 7239 obfuscated port ("_abc") is accepted.
// The result is unmapped and has no zone (it is dropped once checked).
func parseNode(s string, obfuscatedPort bool) (netip.Addr, error) {
	var (
		a   netip.Addr
		err error
	)
	switch {
	case s == "":
		return netip.Addr{}, fmt.Errorf("%w: empty", errBadAddress)
	case s[0] == '[':
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return netip.Addr{}, fmt.Errorf("%w %s: missing ']'", errBadAddress, quoteShort(s))
		}
		if rest := s[end+1:]; rest != "" && (rest[0] != ':' || !validPort(rest[1:], obfuscatedPort)) {
			return netip.Addr{}, fmt.Errorf("%w %s: bad port", errBadAddress, quoteShort(s))
		}
		a, err = netip.ParseAddr(s[1:end])
	default:
		a, err = netip.ParseAddr(s)
		if err != nil {
			// IPv4 with a port: exactly one colon.
			if i := strings.IndexByte(s, ':'); i >= 0 && strings.IndexByte(s[i+1:], ':') < 0 {
				if !validPort(s[i+1:], obfuscatedPort) {
					return netip.Addr{}, fmt.Errorf("%w %s: bad port", errBadAddress, quoteShort(s))
				}
				a, err = netip.ParseAddr(s[:i])
				if err == nil && !a.Is4() {
					return netip.Addr{}, fmt.Errorf("%w %s: IPv6 with a port needs brackets", errBadAddress, quoteShort(s))
				}
			}
		}
	}
	if err != nil || !validZone(a.Zone()) {
		return netip.Addr{}, fmt.Errorf("%w %s", errBadAddress, quoteShort(s))
	}
	return a.WithZone("").Unmap(), nil
}

// validZone reports whether zone looks like an interface name or index
// (ALPHA, DIGIT, ".", "_", "-"). netip accepts any text after "%"; a zone
// holding ":" or "]" is a mangled address, not a zone.
func validZone(zone string) bool {
	for i := 0; i < len(zone); i++ {
		c := zone[i]
		if !(isAlnum(c) || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// validPort reports whether s is a decimal port (0..65535) or, when
// obfuscated is set, an RFC 7239 obfport: "_" followed by ALPHA, DIGIT,
// ".", "_" or "-".
func validPort(s string, obfuscated bool) bool {
	if s == "" {
		return false
	}
	if s[0] == '_' {
		if !obfuscated || len(s) < 2 {
			return false
		}
		for i := 1; i < len(s); i++ {
			c := s[i]
			if !(isAlnum(c) || c == '.' || c == '_' || c == '-') {
				return false
			}
		}
		return true
	}
	if len(s) > 5 {
		return false
	}
	n := 0
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
		n = n*10 + int(s[i]-'0')
	}
	return n <= 65535
}

func isAlnum(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// trimOWS trims optional whitespace (SP, HTAB) from both ends of s.
func trimOWS(s string) string {
	return strings.Trim(s, " \t")
}

// quoteShort quotes s for an error message, cut to a bounded length: the
// text comes from the client.
func quoteShort(s string) string {
	const maxLen = 64
	if len(s) > maxLen {
		return fmt.Sprintf("%q…", s[:maxLen])
	}
	return fmt.Sprintf("%q", s)
}
