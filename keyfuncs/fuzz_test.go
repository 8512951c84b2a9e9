package keyfuncs_test

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfuncs"
)

// validIPKey reports whether key has the shape IP's default grouping
// produces: a canonical IPv4 address; a canonical address of the local-use
// translation prefix 64:ff9b:1::/48 (keyed whole); or a canonical, masked
// IPv6 /56 outside 6to4, Teredo and 64:ff9b:1::/48 (keyed otherwise).
func validIPKey(key string) bool {
	if a, err := netip.ParseAddr(key); err == nil {
		return a.String() == key && (a.Is4() || netip.MustParsePrefix("64:ff9b:1::/48").Contains(a))
	}
	p, err := netip.ParsePrefix(key)
	return err == nil && p.Addr().Is6() && !p.Addr().Is4In6() && p.Bits() == 56 &&
		p == p.Masked() && p.String() == key &&
		!netip.MustParsePrefix("2002::/16").Overlaps(p) && !netip.MustParsePrefix("2001::/32").Overlaps(p) &&
		!netip.MustParsePrefix("64:ff9b:1::/48").Overlaps(p)
}

// keyAddr returns the address a valid key stands for (the prefix's base).
func keyAddr(key string) netip.Addr {
	if a, err := netip.ParseAddr(key); err == nil {
		return a
	}
	return netip.MustParsePrefix(key).Addr()
}

func FuzzIP(f *testing.F) {
	seeds := [][4]string{
		{"203.0.113.7:1234", "", "", ""},
		{"10.0.0.1:1", "198.51.100.1, 203.0.113.7, 10.0.0.2", "for=203.0.113.7", "203.0.113.9"},
		{"[::ffff:10.0.0.1]:80", "::ffff:203.0.113.7", `for="[2001:db8::1]:443"`, "2001:db8::2"},
		{"[fe80::1%eth0]:80", "fe80::2%eth1, unknown", "for=_hidden", "a, b"},
		{"[fd00::1]:1", "[2001:db8::1]:443,,", `for="unterminated`, ""},
		{"10.0.0.1:1", "garbage", "for=unknown;proto=http, for=10.0.0.3", "::1"},
		{"", "1.2.3.4", "for=1.2.3.4", "1.2.3.4"},
		{"not-an-ip", "", "", ""},
		{"10.0.0.1", "2001:db8::1%x:80", `for="\[::1\]"`, "10.0.0.1:80"},
		{"[2002:cb00:7107::1]:1", "2002:c000:22d::1, 2001:0:4136:e378:8000:63bf:3fff:fdd2", `for="[2002:cb00:7107:1::2]"`, "2001::1"},
		{"10.0.0.1:1", "2001:0:4136:e378:8000:63bf:3fff:fdd2", `for="[2001:0:1:2::3]:80"`, "2002::"},
	}
	for _, s := range seeds {
		f.Add(s[0], s[1], s[2], s[3])
	}
	plain := mustIP(f)
	trustedOpts := keyfuncs.WithTrustedProxies("10.0.0.0/8", "fd00::/8")
	trusted := map[string]core.KeyFunc{
		"xff":       mustIP(f, trustedOpts),
		"forwarded": mustIP(f, trustedOpts, keyfuncs.WithForwardingHeader("Forwarded")),
		"header":    mustIP(f, trustedOpts, keyfuncs.WithForwardingHeader("X-Real-IP")),
	}
	// Every non-public range and the documentation ranges (IP refuses
	// trusting all addresses, even in parts).
	trustAll := mustIP(f, keyfuncs.WithTrustedProxies("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16",
		"100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24",
		"::1", "fe80::/10", "fc00::/7", "2001:db8::/32"))
	inTrusted := func(a netip.Addr) bool {
		return netip.MustParsePrefix("10.0.0.0/8").Contains(a) || netip.MustParsePrefix("fd00::/8").Contains(a)
	}

	f.Fuzz(func(t *testing.T, remote, xff, fwd, realIP string) {
		bare := newRequest(remote)
		full := newRequest(remote,
			hdr{"X-Forwarded-For", xff}, hdr{"Forwarded", fwd}, hdr{"X-Real-IP", realIP})

		peerKey, peerErr := plain(bare)
		if peerErr == nil && !validIPKey(peerKey) {
			t.Fatalf("peer key %q has an invalid shape", peerKey)
		}
		// Without trusted proxies the key depends on RemoteAddr alone.
		k, err := plain(full)
		if k != peerKey || (err == nil) != (peerErr == nil) {
			t.Fatalf("headers changed the untrusted key: %q,%v vs %q,%v", k, err, peerKey, peerErr)
		}

		for name, fn := range trusted {
			k, err := fn(full)
			if peerErr != nil {
				// RemoteAddr is checked first, whatever the headers say.
				if err == nil {
					t.Fatalf("%s: key %q from an unusable RemoteAddr", name, k)
				}
				continue
			}
			if err != nil {
				if k != "" {
					t.Fatalf("%s: key %q with error %v", name, k, err)
				}
				continue
			}
			if !validIPKey(k) {
				t.Fatalf("%s: key %q has an invalid shape", name, k)
			}
			if !inTrusted(keyAddr(peerKey)) && k != peerKey {
				t.Fatalf("%s: untrusted peer %q, but key %q", name, peerKey, k)
			}
		}

		// Trusting many addresses, the key is the peer's or one of the
		// X-Forwarded-For entries'.
		if k, err := trustAll(full); err == nil && peerErr == nil {
			candidates := map[string]bool{peerKey: true}
			for _, e := range strings.Split(xff, ",") {
				if ek, err := plain(newRequest(strings.Trim(e, " \t"))); err == nil {
					candidates[ek] = true
				}
			}
			if !candidates[k] {
				t.Fatalf("key %q is neither the peer nor an X-Forwarded-For entry", k)
			}
		}
	})
}

func FuzzJoin(f *testing.F) {
	f.Add("a:b", "c", "a", "b:c")
	f.Add("3:abc", "", "3", "abc")
	f.Add("x|1:y", "z", "x", "y|1:z")
	f.Add("1.2.3.4", "GET /", "1.2.3.4", "GET /")
	r := newRequest("192.0.2.1:1")
	f.Fuzz(func(t *testing.T, a, b, c, d string) {
		k1, err1 := keyfuncs.Join(constKey(a), constKey(b))(r)
		k2, err2 := keyfuncs.Join(constKey(c), constKey(d))(r)
		if (err1 == nil) != (a != "" && b != "") || (err2 == nil) != (c != "" && d != "") {
			t.Fatalf("Join errors %v, %v for parts %q %q %q %q", err1, err2, a, b, c, d)
		}
		if err1 == nil {
			if parts, ok := decodeJoined(k1); !ok || len(parts) != 2 || parts[0] != a || parts[1] != b {
				t.Fatalf("Join(%q, %q) = %q does not decode back", a, b, k1)
			}
		}
		if err1 == nil && err2 == nil && (k1 == k2) != (a == c && b == d) {
			t.Fatalf("Join(%q, %q) = %q, Join(%q, %q) = %q", a, b, k1, c, d, k2)
		}
		// A two-part key never equals a one-part key.
		if k3, err := keyfuncs.Join(constKey(c))(r); err == nil && err1 == nil && k3 == k1 {
			t.Fatalf("Join(%q) = Join(%q, %q) = %q", c, a, b, k1)
		}

		// Fallback: keys from different sources never collide, and keys
		// from one source collide exactly when the inner keys do.
		first := keyfuncs.Fallback(constKey(a), constKey(c))
		second := keyfuncs.Fallback(constKey(""), constKey(c))
		kf, errF := first(r)
		ks, errS := second(r)
		if errF == nil && errS == nil && kf == ks && a != "" {
			t.Fatalf("sources 0 (%q) and 1 (%q) share key %q", a, c, kf)
		}
		if a != "" && c != "" {
			ka, _ := keyfuncs.Fallback(constKey(a))(r)
			kc, _ := keyfuncs.Fallback(constKey(c))(r)
			if (ka == kc) != (a == c) {
				t.Fatalf("Fallback(%q) = %q, Fallback(%q) = %q", a, ka, c, kc)
			}
		}
	})
}
