package clientaddr

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

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

// Requests without a key from Unix socket peers share one bucket (their
// peer is every client's), so the first is logged, once, with what to do;
// an empty RemoteAddr (no address) and IP peers are not.
func TestPeerKeyWarnsOfSocketPeers(t *testing.T) {
	var buf bytes.Buffer
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, nil)))
	t.Cleanup(func() { slog.SetDefault(old); socketWarned.Store(false) })
	socketWarned.Store(false)

	for _, addr := range []string{"", "192.0.2.7:1", "[2001:db8::1]:1"} {
		PeerKey(addr)
	}
	if buf.Len() != 0 {
		t.Fatalf("warned for IP peers or an empty address: %s", buf.String())
	}
	for _, addr := range []string{"@", "/run/nginx.sock", "@"} {
		if k, ok := PeerKey(addr); ok || k != "" {
			t.Errorf("PeerKey(%q) = %q, %v; want no key", addr, k, ok)
		}
	}
	if n := strings.Count(buf.String(), "level=WARN"); n != 1 || !strings.Contains(buf.String(), `WithTrustedProxies(\"unix:\")`) ||
		!strings.Contains(buf.String(), "remote_addr=@") {
		t.Errorf("%d warnings: %s", n, buf.String())
	}
}

func TestIsSocket(t *testing.T) {
	for addr, want := range map[string]bool{
		"": true, "@": true, "@proxy": true, "/run/app.sock": true,
		"192.0.2.7:1": false, "[::1]:80": false, "example.com:80": false, "not-an-ip": false,
	} {
		if got := IsSocket(addr); got != want {
			t.Errorf("IsSocket(%q) = %v, want %v", addr, got, want)
		}
	}
}
