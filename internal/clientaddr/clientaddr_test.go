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
