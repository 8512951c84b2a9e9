package keyfuncs

import (
	"cmp"
	"fmt"
	"math/big"
	"net/netip"
	"slices"
	"strings"
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

// trustedPrefixes returns the validated, normalised trusted prefixes of cfg.
func trustedPrefixes(cfg ipConfig) ([]netip.Prefix, error) {
	var (
		trusted []netip.Prefix
		texts   []string // as the user wrote each, for errors
	)
	for _, s := range cfg.proxies {
		p, err := parseTrusted(s)
		if err != nil {
			return nil, err
		}
		trusted, texts = append(trusted, p), append(texts, strings.TrimSpace(s))
	}
	for i, p := range trusted {
		if err := checkTrusted(p, texts[i]); err != nil {
			return nil, err
		}
	}
	if err := checkTrustedTotal(trusted, texts); err != nil {
		return nil, err
	}
	return trusted, nil
}

// checkTrusted refuses a normalised trusted prefix p (written text) that
// covers every address of its family, or more public addresses than the
// bound of its family.
func checkTrusted(p netip.Prefix, text string) error {
	family, bound := familyBound(p, maxPrefixIPv4Bits, maxPrefixIPv6Bits)
	if p.Bits() == 0 {
		return fmt.Errorf("keyfuncs: trusted proxy %s covers every %s address, so every client could choose its own key "+
			"by sending a forwarding header; list the proxies' own addresses or networks", describePrefix(p, text), family)
	}
	if n := publicSize(p); n.Cmp(sizeOf(p.Addr().BitLen(), bound)) > 0 {
		return fmt.Errorf("keyfuncs: trusted proxy %s covers %s public %s addresses, more than a /%d holds: every client there "+
			"could choose its own key by sending a forwarding header; list the proxies' own addresses or networks",
			describePrefix(p, text), approxPow2(n), family, bound)
	}
	return nil
}

// checkTrustedTotal refuses trusted prefixes whose union covers more public
// addresses of a family than its bound, naming the widest of them.
func checkTrustedTotal(trusted []netip.Prefix, texts []string) error {
	order := make([]int, len(trusted))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		return cmp.Or(trusted[a].Addr().Compare(trusted[b].Addr()), cmp.Compare(trusted[a].Bits(), trusted[b].Bits()))
	})
	// Sorted by start, shorter first: a prefix overlapping the last kept
	// one lies inside it (prefixes nest or are disjoint).
	union := map[int][]int{} // bit length of the family → indexes kept
	var last netip.Prefix
	for _, i := range order {
		if p := trusted[i]; !last.IsValid() || !last.Overlaps(p) {
			last = p
			union[p.Addr().BitLen()] = append(union[p.Addr().BitLen()], i)
		}
	}
	for _, kept := range union {
		family, bound := familyBound(trusted[kept[0]], maxTotalIPv4Bits, maxTotalIPv6Bits)
		total, sizes := new(big.Int), make([]*big.Int, len(kept))
		for j, i := range kept {
			sizes[j] = publicSize(trusted[i])
			total.Add(total, sizes[j])
		}
		if total.Cmp(sizeOf(trusted[kept[0]].Addr().BitLen(), bound)) <= 0 {
			continue
		}
		return fmt.Errorf("keyfuncs: trusted proxies together cover %s public %s addresses, more than a /%d holds; the widest: %s",
			approxPow2(total), family, bound, widest(trusted, texts, kept, sizes))
	}
	return nil
}

// widest names the (at most three) kept prefixes with the most public
// addresses.
func widest(trusted []netip.Prefix, texts []string, kept []int, sizes []*big.Int) string {
	idx := make([]int, len(kept))
	for j := range idx {
		idx[j] = j
	}
	slices.SortStableFunc(idx, func(a, b int) int { return sizes[b].Cmp(sizes[a]) })
	var names []string
	for _, j := range idx[:min(3, len(idx))] {
		names = append(names, describePrefix(trusted[kept[j]], texts[kept[j]]))
	}
	if len(kept) > 3 {
		names = append(names, fmt.Sprintf("and %d more", len(kept)-3))
	}
	return strings.Join(names, ", ")
}

// familyBound returns the family name of p and the bound that applies to it.
func familyBound(p netip.Prefix, v4, v6 int) (string, int) {
	if p.Addr().Is4() {
		return "IPv4", v4
	}
	return "IPv6", v6
}

// publicSize returns the number of addresses of the masked prefix p outside
// the nonPublic ranges.
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
