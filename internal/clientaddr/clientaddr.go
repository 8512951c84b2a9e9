// Package clientaddr keys requests by their peer address, grouped as
// keyfuncs.IP groups client addresses by default, for package core (which
// keyfuncs imports, so core cannot import keyfuncs): a request without a
// usable key is charged to its address's bucket, not to one bucket every
// such client shares.
package clientaddr

import "net/netip"

// IPv6Bits is the prefix length IPv6 peers are grouped by: one customer
// usually holds a whole /56 and can use any of its addresses (see
// keyfuncs.WithIPv6Prefix). keyfuncs.IP groups by it by default.
const IPv6Bits = 56

// PeerKey returns the key of the peer address in remoteAddr (an
// http.Request's RemoteAddr: "host:port", or a bare host as some servers
// and tests set it): an IPv4 address (IPv4-mapped IPv6 included) on its
// own; a 6to4 (2002::/16) or Teredo (2001::/32) address as the IPv4
// address it embeds, whose holder holds every such IPv6 address; any
// other IPv6 address as its /56. ok is false when remoteAddr holds no IP
// address (an empty RemoteAddr, a Unix socket).
func PeerKey(remoteAddr string) (key string, ok bool) {
	a, err := netip.ParseAddr(remoteAddr)
	if err != nil {
		ap, err := netip.ParseAddrPort(remoteAddr)
		if err != nil {
			return "", false
		}
		a = ap.Addr()
	}
	a = a.WithZone("").Unmap()
	return Key(a, 32, IPv6Bits), true
}

// Key returns the key of the unmapped, zoneless address a: a 6to4
// (2002::/16) or Teredo (2001::/32) address is first replaced by the IPv4
// address it embeds, whose holder holds every such IPv6 address; then an
// IPv4 address is grouped by its first v4Bits bits and an IPv6 address by
// its first v6Bits (the whole address when the bits cover it). keyfuncs.IP
// keys clients with it too, so both group addresses alike.
func Key(a netip.Addr, v4Bits, v6Bits int) string {
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

// EmbeddedIPv4 returns the IPv4 address a 6to4 or Teredo address a embeds,
// or a itself.
func EmbeddedIPv4(a netip.Addr) netip.Addr {
	if !a.Is6() {
		return a
	}
	b := a.As16()
	switch {
	case b[0] == 0x20 && b[1] == 0x02: // 6to4: 2002:V4ADDR::/48
		return netip.AddrFrom4([4]byte{b[2], b[3], b[4], b[5]})
	case b[0] == 0x20 && b[1] == 0x01 && b[2] == 0 && b[3] == 0: // Teredo: client address XOR 0xffffffff
		return netip.AddrFrom4([4]byte{^b[12], ^b[13], ^b[14], ^b[15]})
	}
	return a
}
