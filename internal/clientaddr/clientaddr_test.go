package clientaddr

import "testing"

func TestPeerKey(t *testing.T) {
	for _, c := range []struct {
		in, want string
		ok       bool
	}{
		{"192.0.2.7:5555", "192.0.2.7", true},
		{"192.0.2.7", "192.0.2.7", true},
		{"[::ffff:192.0.2.7]:80", "192.0.2.7", true},
		{"[2001:db8:1:2ff::1]:443", "2001:db8:1:200::/56", true},
		{"[2001:db8:1:2aa:ffff::9]:443", "2001:db8:1:200::/56", true},
		{"2001:db8:1:2ff::1", "2001:db8:1:200::/56", true},
		{"[fe80::1%eth0]:80", "fe80::/56", true},
		{"[2002:c000:207::1]:80", "192.0.2.7", true},                      // 6to4 of 192.0.2.7
		{"[2002:c000:207:ffff::2]:80", "192.0.2.7", true},                 // another /64 of the same host
		{"[2001:0:4136:e378:8000:63bf:3fff:fdd2]:80", "192.0.2.45", true}, // Teredo: ^3fff:fdd2 = c000:022d
		{"[64:ff9b::c000:207]:80", "192.0.2.7", true},                     // NAT64 well-known prefix
		{"[64:ff9b::c000:208]:80", "192.0.2.8", true},                     // its neighbour, apart
		{"[::ffff:0:c000:207]:80", "192.0.2.7", true},                     // SIIT IPv4-translated
		{"[::c000:207]:80", "192.0.2.7", true},                            // IPv4-compatible
		{"[::1]:80", "::/56", true},                                       // loopback, not 0.0.0.1
		{"[64:ff9b:1::c000:207]:80", "64:ff9b:1::c000:207", true},         // local-use prefix: whole
		{"[64:ff9b:1:0:c0:2:800:0]:80", "64:ff9b:1:0:c0:2:800:0", true},   // its /64 layout
		{"", "", false},
		{"@", "", false},
		{"example.com:80", "", false},
	} {
		got, ok := PeerKey(c.in)
		if got != c.want || ok != c.ok {
			t.Errorf("PeerKey(%q) = %q, %v; want %q, %v", c.in, got, ok, c.want, c.ok)
		}
	}
}
