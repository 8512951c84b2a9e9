package keyfuncs

import (
	"cmp"
	"fmt"
	"math/big"
	"net/netip"
	"slices"
	"strings"

	"github.com/sluicehq/sluice/internal/clientaddr"
)

// Bounds on the public address space trusted proxies may cover, as the
// prefix length of a network of that size: see WithTrustedProxies.
const (
	maxPrefixIPv4Bits = 12 // one trusted prefix: at most a /12's worth (2^20)
	maxPrefixIPv6Bits = 28 // at most a /28's worth (2^100)
	maxTotalIPv4Bits  = 8  // all of them together: at most a /8's worth (2^24)
	maxTotalIPv6Bits  = 24 // at most a /24's worth (2^104)
)

// nonPublic lists the disjoint ranges no internet client connects from: a
// trusted prefix may cover them at any width.
var nonPublic = []netip.Prefix{
	netip.MustParsePrefix("10.0.0.0/8"),     // private (RFC 1918)
	netip.MustParsePrefix("172.16.0.0/12"),  // private
	netip.MustParsePrefix("192.168.0.0/16"), // private
	netip.MustParsePrefix("100.64.0.0/10"),  // shared address space, CGNAT (RFC 6598)
	netip.MustParsePrefix("127.0.0.0/8"),    // loopback
	netip.MustParsePrefix("169.254.0.0/16"), // link-local
	netip.MustParsePrefix("::1/128"),        // loopback
	netip.MustParsePrefix("fe80::/10"),      // link-local
	netip.MustParsePrefix("fc00::/7"),       // unique local (RFC 4193)
}

// unixProxies, among the trusted proxies, trusts peers on Unix sockets
// (nginx's set_real_ip_from spelling).
const unixProxies = "unix:"

// trustedPrefixes returns the validated, normalised trusted prefixes of
// cfg, and whether unixProxies is among them.
func trustedPrefixes(cfg ipConfig) (trusted []netip.Prefix, sockets bool, err error) {
	var parts []coverage // what each covers, for the bounds
	for _, s := range cfg.proxies {
		if strings.TrimSpace(s) == unixProxies {
			sockets = true
			continue
		}
		p, err := parseTrusted(s)
		if err != nil {
			return nil, false, err
		}
		c, err := measure(p, describePrefix(p, strings.TrimSpace(s)))
		if err != nil {
			return nil, false, err
		}
		trusted, parts = append(trusted, p), append(parts, c...)
	}
	if err := checkTotal(parts); err != nil {
		return nil, false, err
	}
	return trusted, sockets, nil
}

// A coverage is what a trusted prefix covers in one family: an IPv4 prefix
// (the trusted prefix itself, or the IPv4 space an IPv6 one embeds), or an
// IPv6 prefix, whose public addresses outside the embedding ranges count.
type coverage struct {
	p    netip.Prefix
	name string   // for errors: the trusted prefix, and what p is of it
	size *big.Int // public addresses of p in its family
}

// measure returns what the normalised trusted prefix p (named name) covers,
// or an error when p covers every address of a family, or more public
// addresses of one than a prefix's bound allows.
//
// An IPv6 prefix inside a range that embeds IPv4 addresses
// (clientaddr.Embeddings) covers the IPv4 hosts its addresses stand for:
// any IPv4 client could connect from such an address (through a 6to4 relay
// or a Teredo server) or is written as one (by a NAT64 or SIIT translator),
// so 2001::/32, a mere 2^96 of IPv6, is every IPv4 host. So it counts by
// the IPv4 prefix it fixes, under the IPv4 bounds; an IPv6 prefix holding
// a whole range embeds all of IPv4.
func measure(p netip.Prefix, name string) ([]coverage, error) {
	if p.Bits() == 0 {
		return nil, everyone(name, p.Addr().Is4(), "")
	}
	if p.Addr().Is4() {
		c := coverage{p, name, publicSize(p)}
		return []coverage{c}, checkBound(c, maxPrefixIPv4Bits)
	}
	if publicSize(p).Sign() == 0 {
		return nil, nil // loopback, link-local, unique local: no client
	}
	var (
		rest     = coverage{p, name, publicSize(p)}
		embedded []coverage
		via      string // an embedding range p holds whole
	)
	for _, e := range clientaddr.Embeddings {
		switch {
		case e.Prefix.Contains(p.Addr()) && e.Prefix.Bits() <= p.Bits(): // p inside e
			fixed := min(max(p.Bits()-e.Offset, 0), 32)
			v4 := netip.PrefixFrom(clientaddr.IPv4At(p.Addr().As16(), e.Offset, e.Invert), fixed).Masked()
			if fixed == 0 {
				via = e.Name
				break
			}
			embedded = append(embedded, coverage{v4, fmt.Sprintf("%s (%s in the form of %s)", name, v4, e.Name), publicSize(v4)})
			rest.size = new(big.Int)
		case p.Contains(e.Prefix.Addr()): // e inside p
			rest.size.Sub(rest.size, publicSize(e.Prefix))
			via = e.Name
		}
	}
	if err := checkBound(rest, maxPrefixIPv6Bits); err != nil {
		return nil, err
	}
	if via != "" {
		return nil, everyone(name, true, via)
	}
	for _, c := range embedded {
		if err := checkBound(c, maxPrefixIPv4Bits); err != nil {
			return nil, err
		}
	}
	return append(embedded, rest), nil
}

// everyone is the error for a trusted prefix (named name) covering every
// IPv4 or IPv6 address; via names the form in which it embeds IPv4, if so.
func everyone(name string, v4 bool, via string) error {
	family := "IPv6"
	if v4 {
		family = "IPv4"
	}
	how := ""
	if via != "" {
		how = fmt.Sprintf(" (it holds %s)", via)
	}
	return fmt.Errorf("keyfuncs: trusted proxy %s covers every %s address%s, so every client could choose its own key "+
		"by sending a forwarding header; list the proxies' own addresses or networks", name, family, how)
}

// checkBound refuses a coverage of more public addresses than a prefix of
// length bound holds.
func checkBound(c coverage, bound int) error {
	if c.size.Cmp(sizeOf(c.p.Addr().BitLen(), bound)) <= 0 {
		return nil
	}
	return fmt.Errorf("keyfuncs: trusted proxy %s covers %s public %s addresses, more than a /%d holds: every client there "+
		"could choose its own key by sending a forwarding header; list the proxies' own addresses or networks",
		c.name, approxPow2(c.size), family(c.p), bound)
}

// checkTotal refuses coverages whose union covers more public addresses
// of a family than its bound, naming the widest of them. IPv4 prefixes and
// the IPv4 space IPv6 ones embed count together.
func checkTotal(parts []coverage) error {
	slices.SortFunc(parts, func(a, b coverage) int {
		return cmp.Or(a.p.Addr().Compare(b.p.Addr()), cmp.Compare(a.p.Bits(), b.p.Bits()))
	})
	// Sorted by start, shorter first: a prefix overlapping the last kept
	// one lies inside it (prefixes nest or are disjoint), and so does its
	// IPv6 rest (an IPv6 prefix inside another holds no embedding range
	// the outer one does not).
	union := map[int][]coverage{} // bit length of the family → kept
	var last netip.Prefix
	for _, c := range parts {
		if !last.IsValid() || !last.Overlaps(c.p) {
			last = c.p
			union[c.p.Addr().BitLen()] = append(union[c.p.Addr().BitLen()], c)
		}
	}
	for bitLen, kept := range union {
		bound := maxTotalIPv6Bits
		if bitLen == 32 {
			bound = maxTotalIPv4Bits
		}
		total := new(big.Int)
		for _, c := range kept {
			total.Add(total, c.size)
		}
		if total.Cmp(sizeOf(bitLen, bound)) <= 0 {
			continue
		}
		return fmt.Errorf("keyfuncs: trusted proxies together cover %s public %s addresses, more than a /%d holds; the widest: %s",
			approxPow2(total), family(kept[0].p), bound, widest(kept))
	}
	return nil
}

// widest names the (at most three) kept coverages with the most public
// addresses.
func widest(kept []coverage) string {
	kept = slices.Clone(kept)
	slices.SortStableFunc(kept, func(a, b coverage) int { return b.size.Cmp(a.size) })
	var names []string
	for _, c := range kept[:min(3, len(kept))] {
		names = append(names, c.name)
	}
	if len(kept) > 3 {
		names = append(names, fmt.Sprintf("and %d more", len(kept)-3))
	}
	return strings.Join(names, ", ")
}

// family names the address family of p.
func family(p netip.Prefix) string {
	if p.Addr().Is4() {
		return "IPv4"
	}
	return "IPv6"
}

// publicSize returns the number of addresses of the masked prefix p outside
// the nonPublic ranges and, for IPv6, outside the ranges that embed IPv4
// addresses (which count as the IPv4 space they embed: see measure).
func publicSize(p netip.Prefix) *big.Int {
	n := sizeOf(p.Addr().BitLen(), p.Bits())
	for _, q := range nonPublic {
		if !p.Overlaps(q) {
			continue
		}
		if q.Bits() <= p.Bits() {
			return new(big.Int) // p lies inside q
		}
		n.Sub(n, sizeOf(q.Addr().BitLen(), q.Bits()))
	}
	return n
}

// sizeOf returns the number of addresses of a prefix of length bits in a
// family of bitLen-bit addresses.
func sizeOf(bitLen, bits int) *big.Int {
	return new(big.Int).Lsh(big.NewInt(1), uint(bitLen-bits))
}

// approxPow2 writes n as "2^k" when it is a power of two, else "over 2^k".
func approxPow2(n *big.Int) string {
	k := n.BitLen() - 1
	if n.Cmp(new(big.Int).Lsh(big.NewInt(1), uint(k))) == 0 {
		return fmt.Sprintf("2^%d", k)
	}
	return fmt.Sprintf("over 2^%d", k)
}

// describePrefix quotes the prefix as written, with its normalised form
// when that differs ("::ffff:0.0.0.0/97" is 0.0.0.0/1).
func describePrefix(p netip.Prefix, text string) string {
	if p.String() == text {
		return fmt.Sprintf("%q", text)
	}
	return fmt.Sprintf("%q (%s)", text, p)
}

// parseTrusted parses a trusted CIDR or single address.
func parseTrusted(s string) (netip.Prefix, error) {
	s = strings.TrimSpace(s)
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("keyfuncs: invalid trusted proxy CIDR %q: %w", s, err)
		}
		return normalizePrefix(p), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("keyfuncs: invalid trusted proxy address %q: %w", s, err)
	}
	a = a.WithZone("").Unmap()
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// normalizePrefix masks p and turns an IPv4-mapped IPv6 prefix of at least
// 96 bits into the equivalent IPv4 prefix, since addresses are unmapped
// before they are compared.
func normalizePrefix(p netip.Prefix) netip.Prefix {
	a := p.Addr()
	if a.Is4In6() && p.Bits() >= 96 {
		p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
	}
	return p.Masked()
}
