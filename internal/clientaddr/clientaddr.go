// Package clientaddr keys requests by their peer address, grouped as
// keyfuncs.IP groups client addresses by default, for package core (which
// keyfuncs imports, so core cannot import keyfuncs): a request without a
// usable key is charged to its address's bucket, not to one bucket every
// such client shares. It also holds the table of IPv6 ranges that embed
// IPv4 addresses, which keyfuncs uses both to key clients and to measure
// trusted proxies.
package clientaddr

import (
	"log/slog"
	"net/netip"
	"sync/atomic"
)

// IPv6Bits is the prefix length IPv6 peers are grouped by: one customer
// usually holds a whole /56 and can use any of its addresses (see
// keyfuncs.WithIPv6Prefix). keyfuncs.IP groups by it by default.
const IPv6Bits = 56

// An Embedding is an IPv6 range whose addresses each stand for one IPv4
// host: whoever holds the IPv4 address can reach a server from every
// address of the range built from it (6to4, Teredo), or a translator in
// front of the server writes every IPv4 client as such an address (NAT64
// and SIIT prefixes). Grouped by /56, each range would put many IPv4
// clients in one bucket (64:ff9b::/96 puts all of them in one); so such
// an address is keyed by the IPv4 address it embeds, and a trusted prefix
// inside the range is measured by the IPv4 space it embeds.
type Embedding struct {
	Prefix netip.Prefix
	Name   string // for messages: what the range is, and its RFC
	Offset int    // bit offset of the embedded IPv4 address
	Invert bool   // the IPv4 address is stored inverted (Teredo)
	// Whole: where the IPv4 address sits depends on the prefix length the
	// operator's translator uses (RFC 6052 §2.2: /48 to /96 inside
	// 64:ff9b:1::/48), so an address is keyed whole (the translator writes
	// one address per IPv4 client, whatever the length), and Offset is the
	// /96 layout, the one that embeds the most IPv4 space under any
	// prefix.
	Whole bool
}

// Embeddings lists the IPv6 ranges that embed IPv4 addresses. They are
// disjoint.
var Embeddings = []Embedding{
	{Prefix: netip.MustParsePrefix("2002::/16"), Name: "6to4 (RFC 3056)", Offset: 16},
	{Prefix: netip.MustParsePrefix("2001::/32"), Name: "Teredo (RFC 4380)", Offset: 96, Invert: true},
	{Prefix: netip.MustParsePrefix("64:ff9b::/96"), Name: "the NAT64 well-known prefix (RFC 6052)", Offset: 96},
	{Prefix: netip.MustParsePrefix("64:ff9b:1::/48"), Name: "the local-use translation prefix (RFC 8215)", Offset: 96, Whole: true},
	{Prefix: netip.MustParsePrefix("::ffff:0:0:0/96"), Name: "IPv4-translated addresses (SIIT, RFC 2765)", Offset: 96},
	{Prefix: netip.MustParsePrefix("::/96"), Name: "IPv4-compatible addresses (RFC 4291)", Offset: 96},
}

// EmbeddingOf returns the Embedding whose range holds the IPv6 address a.
func EmbeddingOf(a netip.Addr) (Embedding, bool) {
	if !a.Is6() || a.Is4In6() {
		return Embedding{}, false
	}
	b := a.As16()
	// A cheap first look: every range starts with 0x00 or 0x20.
	if b[0] != 0 && b[0] != 0x20 {
		return Embedding{}, false
	}
	for _, e := range Embeddings {
		if e.Prefix.Contains(a) {
			return e, true
		}
	}
	return Embedding{}, false
}

// IPv4At returns the 32 bits of b at bit offset off (a multiple of 8, at
// most 96), inverted when invert is set.
func IPv4At(b [16]byte, off int, invert bool) netip.Addr {
	var v [4]byte
	copy(v[:], b[off/8:off/8+4])
	if invert {
		for i := range v {
			v[i] = ^v[i]
		}
	}
	return netip.AddrFrom4(v)
}

// PeerKey returns the key of the peer address in remoteAddr (an
// http.Request's RemoteAddr: "host:port", or a bare host as some servers
// and tests set it), as Key groups it with IPv4 by address and IPv6 by
// /56. ok is false when remoteAddr holds no IP address (an empty
// RemoteAddr, a Unix socket). Requests from a Unix socket peer then share
// one bucket, since their peer is the same for every client: the first
// such peer is logged, once per process, with what to do (warnSocket).
func PeerKey(remoteAddr string) (key string, ok bool) {
	a, err := netip.ParseAddr(remoteAddr)
	if err != nil {
		ap, err := netip.ParseAddrPort(remoteAddr)
		if err != nil {
			if remoteAddr != "" && IsSocket(remoteAddr) {
				warnSocket(remoteAddr)
			}
			return "", false
		}
		a = ap.Addr()
	}
	a = a.WithZone("").Unmap()
	return Key(a, 32, IPv6Bits), true
}

// socketWarned is set once warnSocket has logged.
var socketWarned atomic.Bool

// warnSocket logs, once per process, that requests without a key from
// Unix socket peers share one bucket. It is the one place that sees it:
// keyfuncs.IP fails loudly on such a peer, but a Limiter keyed otherwise
// (a token, a header) charges its keyless requests by the peer alone.
func warnSocket(remoteAddr string) {
	if socketWarned.Load() || !socketWarned.CompareAndSwap(false, true) {
		return
	}
	slog.Default().Warn("sluice: requests without a key come from a Unix socket peer, the same for every client, "+
		"so they share one bucket (logged once); if a reverse proxy connects through the socket, have the Limiter "+
		"find the client's address with core.WithKeyErrorRule(core.KeyErrorPerAddress, keyfuncs.IP(keyfuncs.WithTrustedProxies(\"unix:\")))",
		slog.String("remote_addr", cut(remoteAddr)))
}

// cut bounds a client-influenced text for a log record.
func cut(s string) string {
	const maxLen = 64
	if len(s) > maxLen {
		return s[:maxLen] + "…"
	}
	return s
}

// IsSocket reports whether remoteAddr, an http.Request's RemoteAddr, is
// that of a Unix socket peer rather than an IP address: "@" (an unnamed
// socket on Linux), "@name" (an abstract one), a path, or "" (an unnamed
// socket on the BSDs and macOS, or no address at all).
func IsSocket(remoteAddr string) bool {
	return remoteAddr == "" || remoteAddr[0] == '@' || remoteAddr[0] == '/'
}

// Key returns the key of the unmapped, zoneless address a. An address of
// an Embedding's range is first replaced by the IPv4 address it embeds
// (EmbeddedIPv4), or, where the range does not say where that is, keyed
// whole; then an IPv4 address is grouped by its first v4Bits bits and an
// IPv6 address by its first v6Bits (the whole address when the bits cover
// it). keyfuncs.IP keys clients with it too, so both group addresses
// alike.
func Key(a netip.Addr, v4Bits, v6Bits int) string {
	if e, ok := EmbeddingOf(a); ok && e.Whole {
		return a.String()
	}
	a = EmbeddedIPv4(a)
	bits := v6Bits
	if a.Is4() {
		bits = v4Bits
	}
	if bits >= a.BitLen() {
		return a.String()
	}
	p, err := a.Prefix(bits)
	if err != nil { // unreachable for valid bits and a zoneless address
		return a.String()
	}
	return p.String()
}

// EmbeddedIPv4 returns the IPv4 address that an address a of an
// Embedding's range embeds, or a itself: for a range keyed whole, and for
// the IPv4-compatible addresses of 0.0.0.0/8, which are "::", "::1" and
// their neighbours, never an IPv4 host (RFC 4291 §2.5.5.1 requires a
// global unicast address).
func EmbeddedIPv4(a netip.Addr) netip.Addr {
	e, ok := EmbeddingOf(a)
	if !ok || e.Whole {
		return a
	}
	v4 := IPv4At(a.As16(), e.Offset, e.Invert)
	if e.Prefix.Bits() == 96 && e.Prefix.Addr().IsUnspecified() && v4.As4()[0] == 0 {
		return a
	}
	return v4
}
