package keyfuncs_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/clientaddr"
	"github.com/sluicehq/sluice/keyfuncs"
)

// hdr is one header line; repeated names become several lines, in order.
type hdr struct{ name, value string }

func newRequest(remoteAddr string, headers ...hdr) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = remoteAddr
	for _, h := range headers {
		r.Header.Add(h.name, h.value)
	}
	return r
}

// outcome classifies a KeyFunc result for table tests.
type outcome int

const (
	ok      outcome = iota // key as given
	noKey                  // error wrapping core.ErrNoKey
	badData                // error not wrapping core.ErrNoKey
)

func checkKey(t *testing.T, fn core.KeyFunc, r *http.Request, want outcome, wantKey string) {
	t.Helper()
	got, err := fn(r)
	switch want {
	case ok:
		if err != nil {
			t.Fatalf("key: unexpected error %v", err)
		}
		if got != wantKey {
			t.Fatalf("key = %q, want %q", got, wantKey)
		}
	case noKey:
		if err == nil {
			t.Fatalf("key = %q, want an error wrapping ErrNoKey", got)
		}
		if !errors.Is(err, core.ErrNoKey) {
			t.Fatalf("error %v does not wrap ErrNoKey", err)
		}
	case badData:
		if err == nil {
			t.Fatalf("key = %q, want an error", got)
		}
		if errors.Is(err, core.ErrNoKey) {
			t.Fatalf("error %v wraps ErrNoKey; want a data error", err)
		}
	}
	if err != nil && got != "" {
		t.Fatalf("key %q returned together with error %v", got, err)
	}
}

func mustIP(t testing.TB, opts ...keyfuncs.IPOption) core.KeyFunc {
	t.Helper()
	fn, err := keyfuncs.IP(opts...)
	if err != nil {
		t.Fatalf("IP: %v", err)
	}
	return fn
}

func TestIPWithoutTrustedProxies(t *testing.T) {
	fn := mustIP(t)
	spoofs := []hdr{
		{"X-Forwarded-For", "198.51.100.66"},
		{"X-Forwarded-For", "198.51.100.67, 198.51.100.68"},
		{"Forwarded", "for=198.51.100.69"},
		{"X-Real-IP", "198.51.100.70"},
		{"True-Client-IP", "198.51.100.71"},
		{"CF-Connecting-IP", "198.51.100.72"},
	}
	tests := []struct {
		name   string
		remote string
		want   outcome
		key    string
	}{
		{"ipv4 with port", "203.0.113.7:1234", ok, "203.0.113.7"},
		{"ipv4 without port", "203.0.113.7", ok, "203.0.113.7"},
		{"ipv6 grouped by /56", "[2001:db8:1:2:3:4:5:6]:443", ok, "2001:db8:1::/56"},
		{"ipv6 without port", "2001:db8:1:2:3:4:5:6", ok, "2001:db8:1::/56"},
		{"ipv6 brackets without port", "[2001:db8:1:2::9]", ok, "2001:db8:1::/56"},
		{"ipv4-mapped is ipv4, never /56", "[::ffff:203.0.113.7]:80", ok, "203.0.113.7"},
		{"zone dropped", "[fe80::1%eth0]:80", ok, "fe80::/56"},
		{"zone dropped without port", "fe80::1%eth0", ok, "fe80::/56"},
		{"loopback v6", "[::1]:80", ok, "::/56"},
		{"empty RemoteAddr", "", noKey, ""},
		{"hostname", "localhost:80", badData, ""},
		{"garbage", "not an address", badData, ""},
		{"port out of range", "203.0.113.7:65536", badData, ""},
		{"port not numeric", "203.0.113.7:http", badData, ""},
		{"empty port", "203.0.113.7:", badData, ""},
		{"unclosed bracket", "[2001:db8::1:80", badData, ""},
		{"junk after bracket", "[2001:db8::1]x80", badData, ""},
		{"ipv4 zone", "203.0.113.7%eth0:80", badData, ""},
		{"unix socket", "@", badData, ""},
		{"obfuscated port not allowed here", "203.0.113.7:_x", badData, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkKey(t, fn, newRequest(tt.remote), tt.want, tt.key)
			// Forwarding headers never change anything without trusted proxies.
			checkKey(t, fn, newRequest(tt.remote, spoofs...), tt.want, tt.key)
		})
	}
}

func TestIPXForwardedFor(t *testing.T) {
	trusted := []keyfuncs.IPOption{keyfuncs.WithTrustedProxies("10.0.0.0/8", "fd00::/8")}
	xff := func(v string) hdr { return hdr{"X-Forwarded-For", v} }
	tests := []struct {
		name    string
		remote  string
		headers []hdr
		want    outcome
		key     string
	}{
		{"untrusted peer: XFF ignored", "198.51.100.1:1", []hdr{xff("203.0.113.7")}, ok, "198.51.100.1"},
		{"untrusted peer inside public space next to trusted", "11.0.0.1:1", []hdr{xff("203.0.113.7")}, ok, "11.0.0.1"},
		{"trusted peer, one hop", "10.0.0.1:1", []hdr{xff("203.0.113.7")}, ok, "203.0.113.7"},
		{"client-forged left entries ignored", "10.0.0.1:1", []hdr{xff("6.6.6.6, 7.7.7.7, 203.0.113.7")}, ok, "203.0.113.7"},
		{"trusted hops skipped", "10.0.0.1:1", []hdr{xff("6.6.6.6, 203.0.113.7, 10.0.0.9, 10.3.3.3")}, ok, "203.0.113.7"},
		{"several lines merged in order", "10.0.0.1:1", []hdr{xff("6.6.6.6"), xff("203.0.113.7, 10.0.0.2")}, ok, "203.0.113.7"},
		{"walk crosses lines", "10.0.0.1:1", []hdr{xff("6.6.6.6, 203.0.113.7"), xff("10.0.0.2"), xff("10.0.0.3")}, ok, "203.0.113.7"},
		{"last line holds the client", "10.0.0.1:1", []hdr{xff("203.0.113.8"), xff("203.0.113.7")}, ok, "203.0.113.7"},
		{"every hop trusted: left-most", "10.0.0.1:1", []hdr{xff("10.1.1.1, 10.2.2.2")}, ok, "10.1.1.1"},
		{"trusted peer, no header: the peer", "10.0.0.1:1", nil, ok, "10.0.0.1"},
		{"trusted peer, empty header: the peer", "10.0.0.1:1", []hdr{xff("")}, ok, "10.0.0.1"},
		{"empty list elements skipped", "10.0.0.1:1", []hdr{xff(" , 203.0.113.7 ,, ")}, ok, "203.0.113.7"},
		{"tabs are whitespace", "10.0.0.1:1", []hdr{xff("6.6.6.6,\t203.0.113.7\t")}, ok, "203.0.113.7"},
		{"mapped peer in trusted IPv4 CIDR", "[::ffff:10.0.0.1]:1", []hdr{xff("203.0.113.7")}, ok, "203.0.113.7"},
		{"mapped trusted hop skipped", "10.0.0.1:1", []hdr{xff("203.0.113.7, ::ffff:10.9.9.9")}, ok, "203.0.113.7"},
		{"mapped client keyed as IPv4", "10.0.0.1:1", []hdr{xff("::ffff:203.0.113.7")}, ok, "203.0.113.7"},
		{"mapped untrusted peer not trusted", "[::ffff:198.51.100.1]:1", []hdr{xff("203.0.113.7")}, ok, "198.51.100.1"},
		{"IPv6 trusted peer", "[fd00::1]:1", []hdr{xff("203.0.113.7")}, ok, "203.0.113.7"},
		{"IPv6 trusted peer with zone", "[fd00::1%eth0]:1", []hdr{xff("2001:db8:1:2::77")}, ok, "2001:db8:1::/56"},
		{"zoned trusted hop skipped", "10.0.0.1:1", []hdr{xff("203.0.113.7, fd00::5%eth1")}, ok, "203.0.113.7"},
		{"IPv6 client grouped", "10.0.0.1:1", []hdr{xff("2001:db8:aa:bb:1:2:3:4")}, ok, "2001:db8:aa::/56"},
		{"entry with port", "10.0.0.1:1", []hdr{xff("203.0.113.7:5555")}, ok, "203.0.113.7"},
		{"bracketed IPv6 entry with port", "10.0.0.1:1", []hdr{xff("[2001:db8::1]:443")}, ok, "2001:db8::/56"},
		{"garbage left of the client never parsed", "10.0.0.1:1", []hdr{xff("<script>, ;;, 203.0.113.7")}, ok, "203.0.113.7"},
		{"garbage at the client position", "10.0.0.1:1", []hdr{xff("evil.example")}, badData, ""},
		{"garbage behind a trusted hop", "10.0.0.1:1", []hdr{xff("203.0.113.7, 10.0.0.300")}, badData, ""},
		{"IPv6 entry with port without brackets", "10.0.0.1:1", []hdr{xff("2001:db8::1%x:80")}, badData, ""},
		{"unknown client", "10.0.0.1:1", []hdr{xff("unknown")}, noKey, ""},
		{"Forwarded ignored in XFF mode", "10.0.0.1:1", []hdr{{"Forwarded", "for=6.6.6.6"}}, ok, "10.0.0.1"},
		{"X-Real-IP ignored in XFF mode", "10.0.0.1:1", []hdr{{"X-Real-IP", "6.6.6.6"}, xff("203.0.113.7")}, ok, "203.0.113.7"},
	}
	for _, mode := range []struct {
		name string
		opts []keyfuncs.IPOption
	}{
		{"default", trusted},
		{"explicit", append(append([]keyfuncs.IPOption(nil), trusted...), keyfuncs.WithForwardingHeader("X-Forwarded-For"))},
		{"any case", append(append([]keyfuncs.IPOption(nil), trusted...), keyfuncs.WithForwardingHeader("x-forwarded-for"))},
		{"netip prefixes", []keyfuncs.IPOption{keyfuncs.WithTrustedProxies(netip.MustParsePrefix("10.0.0.0/8").String(), netip.MustParsePrefix("fd00::/8").String())}},
	} {
		fn := mustIP(t, mode.opts...)
		for _, tt := range tests {
			t.Run(mode.name+"/"+tt.name, func(t *testing.T) {
				checkKey(t, fn, newRequest(tt.remote, tt.headers...), tt.want, tt.key)
			})
		}
	}
}

func TestIPForwarded(t *testing.T) {
	fn := mustIP(t, keyfuncs.WithTrustedProxies("10.0.0.0/8", "2001:db8:ffff::/48"), keyfuncs.WithForwardingHeader("forwarded"))
	fwd := func(v string) hdr { return hdr{"Forwarded", v} }
	tests := []struct {
		name    string
		remote  string
		headers []hdr
		want    outcome
		key     string
	}{
		{"untrusted peer: ignored", "198.51.100.1:1", []hdr{fwd("for=203.0.113.7")}, ok, "198.51.100.1"},
		{"token value", "10.0.0.1:1", []hdr{fwd("for=203.0.113.7")}, ok, "203.0.113.7"},
		{"quoted value", "10.0.0.1:1", []hdr{fwd(`for="203.0.113.7"`)}, ok, "203.0.113.7"},
		{"quoted IPv4 with port", "10.0.0.1:1", []hdr{fwd(`for="203.0.113.7:8080"`)}, ok, "203.0.113.7"},
		{"quoted IPv6 in brackets with port", "10.0.0.1:1", []hdr{fwd(`for="[2001:db8:cafe::17]:4711"`)}, ok, "2001:db8:cafe::/56"},
		{"obfuscated port", "10.0.0.1:1", []hdr{fwd(`for="[2001:db8:cafe::17]:_p1"`)}, ok, "2001:db8:cafe::/56"},
		{"parameter names case-insensitive", "10.0.0.1:1", []hdr{fwd("For=203.0.113.7;PROTO=https")}, ok, "203.0.113.7"},
		{"other parameters", "10.0.0.1:1", []hdr{fwd(`proto=https;for=203.0.113.7;by="[2001:db8:ffff::1]";host=example.com`)}, ok, "203.0.113.7"},
		{"spaces around separators", "10.0.0.1:1", []hdr{fwd(" for=6.6.6.6 ,  for=203.0.113.7 ; proto=http ")}, ok, "203.0.113.7"},
		{"walk from the right", "10.0.0.1:1", []hdr{fwd("for=6.6.6.6, for=203.0.113.7;proto=https, for=10.0.0.2")}, ok, "203.0.113.7"},
		{"trusted IPv6 hop skipped", "10.0.0.1:1", []hdr{fwd(`for=203.0.113.7, for="[2001:db8:ffff::9]"`)}, ok, "203.0.113.7"},
		{"mapped trusted hop skipped", "10.0.0.1:1", []hdr{fwd(`for=203.0.113.7, for="[::ffff:10.1.1.1]"`)}, ok, "203.0.113.7"},
		{"zoned entry", "10.0.0.1:1", []hdr{fwd(`for="[fe80::1%25eth0]:80"`)}, ok, "fe80::/56"},
		{"several lines", "10.0.0.1:1", []hdr{fwd("for=6.6.6.6"), fwd("for=203.0.113.7"), fwd("for=10.0.0.5")}, ok, "203.0.113.7"},
		{"every hop trusted: left-most", "10.0.0.1:1", []hdr{fwd("for=10.1.1.1, for=10.2.2.2")}, ok, "10.1.1.1"},
		{"no header: the peer", "10.0.0.1:1", nil, ok, "10.0.0.1"},
		{"empty elements", "10.0.0.1:1", []hdr{fwd(",, for=203.0.113.7 ,")}, ok, "203.0.113.7"},
		{"escaped quoted string", "10.0.0.1:1", []hdr{fwd(`for="203.0.113.\7"`)}, ok, "203.0.113.7"},
		{"malformed line left of client never parsed", "10.0.0.1:1", []hdr{fwd(`for="evil`), fwd("for=203.0.113.7")}, ok, "203.0.113.7"},
		{"XFF ignored in Forwarded mode", "10.0.0.1:1", []hdr{{"X-Forwarded-For", "6.6.6.6"}}, ok, "10.0.0.1"},
		{"unknown", "10.0.0.1:1", []hdr{fwd("for=unknown")}, noKey, ""},
		{"unknown quoted, any case", "10.0.0.1:1", []hdr{fwd(`for="UNKNOWN"`)}, noKey, ""},
		{"obfuscated identifier stops the walk", "10.0.0.1:1", []hdr{fwd("for=203.0.113.7, for=_hidden, for=10.0.0.2")}, noKey, ""},
		{"element without for", "10.0.0.1:1", []hdr{fwd("for=203.0.113.7, proto=https")}, noKey, ""},
		{"element of only separators", "10.0.0.1:1", []hdr{fwd("for=203.0.113.7, ;;")}, noKey, ""},
		{"client's open quote before the proxy's element never read", "10.0.0.1:1", []hdr{fwd(`for="6.6.6.6, for=203.0.113.7`)}, ok, "203.0.113.7"},
		{"client's open quote before a quoted element never read", "10.0.0.1:1", []hdr{fwd(`for="6.6.6.6, for="[2001:db8::7]:443"`)}, ok, "2001:db8::/56"},
		{"open quote reached behind a trusted hop", "10.0.0.1:1", []hdr{fwd(`for="6.6.6.6, for=10.0.0.3`)}, badData, ""},
		{"escaped closing quote", "10.0.0.1:1", []hdr{fwd(`for="203.0.113.7\"`)}, badData, ""},
		{"repeated parameter, other order", "10.0.0.1:1", []hdr{fwd("proto=http;for=203.0.113.7;proto=https")}, badData, ""},
		{"repeated parameter", "10.0.0.1:1", []hdr{fwd("for=203.0.113.7;for=6.6.6.6")}, badData, ""},
		{"missing value", "10.0.0.1:1", []hdr{fwd("for=;proto=http")}, badData, ""},
		{"missing equals", "10.0.0.1:1", []hdr{fwd("for")}, badData, ""},
		{"unquoted colon", "10.0.0.1:1", []hdr{fwd("for=203.0.113.7:80")}, badData, ""},
		{"unquoted IPv6", "10.0.0.1:1", []hdr{fwd("for=[2001:db8::1]")}, badData, ""},
		{"stray characters", "10.0.0.1:1", []hdr{fwd("for=203.0.113.7 x")}, badData, ""},
		{"empty quoted value", "10.0.0.1:1", []hdr{fwd(`for=""`)}, badData, ""},
		{"hostname", "10.0.0.1:1", []hdr{fwd("for=example.com")}, badData, ""},
		{"garbage behind a trusted hop", "10.0.0.1:1", []hdr{fwd(`for="1.2.3", for=10.0.0.3`)}, badData, ""},
		{"control byte in quoted string", "10.0.0.1:1", []hdr{fwd("for=\"203.0.113.7\x01\"")}, badData, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkKey(t, fn, newRequest(tt.remote, tt.headers...), tt.want, tt.key)
		})
	}
}

func TestIPClientIPHeader(t *testing.T) {
	fn := mustIP(t, keyfuncs.WithTrustedProxies("173.245.48.0/20"), keyfuncs.WithForwardingHeader("cf-connecting-ip"))
	cf := func(v string) hdr { return hdr{"CF-Connecting-IP", v} }
	tests := []struct {
		name    string
		remote  string
		headers []hdr
		want    outcome
		key     string
	}{
		{"trusted peer", "173.245.48.5:1", []hdr{cf("203.0.113.7")}, ok, "203.0.113.7"},
		{"trusted peer, IPv6 client grouped", "173.245.48.5:1", []hdr{cf("2001:db8:1:2::3")}, ok, "2001:db8:1::/56"},
		{"trusted peer, mapped client", "173.245.48.5:1", []hdr{cf("::ffff:203.0.113.7")}, ok, "203.0.113.7"},
		{"value taken even if it is a trusted address", "173.245.48.5:1", []hdr{cf("173.245.48.9")}, ok, "173.245.48.9"},
		{"untrusted peer: spoof ignored", "198.51.100.1:1", []hdr{cf("203.0.113.7")}, ok, "198.51.100.1"},
		{"trusted peer, no header: the peer", "173.245.48.5:1", nil, ok, "173.245.48.5"},
		{"trusted peer, empty header: the peer", "173.245.48.5:1", []hdr{cf("")}, ok, "173.245.48.5"},
		{"XFF ignored in this mode", "173.245.48.5:1", []hdr{{"X-Forwarded-For", "6.6.6.6"}}, ok, "173.245.48.5"},
		{"X-Real-IP ignored in this mode", "173.245.48.5:1", []hdr{{"X-Real-IP", "6.6.6.6"}, cf("203.0.113.7")}, ok, "203.0.113.7"},
		{"two lines are ambiguous", "173.245.48.5:1", []hdr{cf("6.6.6.6"), cf("203.0.113.7")}, badData, ""},
		{"a list is not one address", "173.245.48.5:1", []hdr{cf("6.6.6.6, 203.0.113.7")}, badData, ""},
		{"garbage", "173.245.48.5:1", []hdr{cf("a.b.c.d")}, badData, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkKey(t, fn, newRequest(tt.remote, tt.headers...), tt.want, tt.key)
		})
	}
}

func TestIPPrefixGrouping(t *testing.T) {
	tests := []struct {
		name   string
		opts   []keyfuncs.IPOption
		remote string
		key    string
	}{
		{"default /56", nil, "[2001:db8:1:2:ffff::1]:1", "2001:db8:1::/56"},
		{"/64", []keyfuncs.IPOption{keyfuncs.WithIPv6Prefix(64)}, "[2001:db8:1:2:ffff::1]:1", "2001:db8:1:2::/64"},
		{"/48", []keyfuncs.IPOption{keyfuncs.WithIPv6Prefix(48)}, "[2001:db8:1:2::1]:1", "2001:db8:1::/48"},
		{"/56", []keyfuncs.IPOption{keyfuncs.WithIPv6Prefix(56)}, "[2001:db8:1:2ff::1]:1", "2001:db8:1:200::/56"},
		{"/128 is the address", []keyfuncs.IPOption{keyfuncs.WithIPv6Prefix(128)}, "[2001:db8:1:2::1]:1", "2001:db8:1:2::1"},
		{"IPv6 option never masks IPv4", []keyfuncs.IPOption{keyfuncs.WithIPv6Prefix(8)}, "203.0.113.7:1", "203.0.113.7"},
		{"IPv6 option never masks mapped IPv4", []keyfuncs.IPOption{keyfuncs.WithIPv6Prefix(8)}, "[::ffff:203.0.113.7]:1", "203.0.113.7"},
		{"IPv4 /24", []keyfuncs.IPOption{keyfuncs.WithIPv4Prefix(24)}, "203.0.113.7:1", "203.0.113.0/24"},
		{"IPv4 /24 for mapped", []keyfuncs.IPOption{keyfuncs.WithIPv4Prefix(24)}, "[::ffff:203.0.113.7]:1", "203.0.113.0/24"},
		{"IPv4 option never masks IPv6", []keyfuncs.IPOption{keyfuncs.WithIPv4Prefix(8), keyfuncs.WithIPv6Prefix(128)}, "[2001:db8::1]:1", "2001:db8::1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkKey(t, mustIP(t, tt.opts...), newRequest(tt.remote), ok, tt.key)
		})
	}

	// Rotating inside one /56 keeps the key; another /56 changes it.
	fn := mustIP(t)
	a, _ := fn(newRequest("[2001:db8:1:2::1]:1"))
	b, _ := fn(newRequest("[2001:db8:1:ff:dead:beef:0:7]:1"))
	c, _ := fn(newRequest("[2001:db8:1:100::1]:1"))
	if a != b || a == c || a == "" {
		t.Fatalf("/56 grouping: %q %q %q", a, b, c)
	}
	// Distinct IPv4 clients stay apart (no IPv4 address falls into a shared group).
	x, _ := fn(newRequest("203.0.113.7:1"))
	y, _ := fn(newRequest("203.0.113.8:1"))
	if x == y {
		t.Fatalf("two IPv4 clients share key %q", x)
	}
}

func TestIPTrustedProxyForms(t *testing.T) {
	tests := []struct {
		name    string
		opts    []keyfuncs.IPOption
		peer    string
		trusted bool
	}{
		{"single IPv4 address", []keyfuncs.IPOption{keyfuncs.WithTrustedProxies("192.0.2.10")}, "192.0.2.10:1", true},
		{"single IPv4 address, neighbour", []keyfuncs.IPOption{keyfuncs.WithTrustedProxies("192.0.2.10")}, "192.0.2.11:1", false},
		{"single IPv6 address", []keyfuncs.IPOption{keyfuncs.WithTrustedProxies("::1")}, "[::1]:1", true},
		{"mapped prefix becomes IPv4", []keyfuncs.IPOption{keyfuncs.WithTrustedProxies("::ffff:10.0.0.0/104")}, "10.200.0.1:1", true},
		{"mapped single address", []keyfuncs.IPOption{keyfuncs.WithTrustedProxies("::ffff:192.0.2.10")}, "192.0.2.10:1", true},
		{"unmasked CIDR", []keyfuncs.IPOption{keyfuncs.WithTrustedProxies("10.1.2.3/8")}, "10.9.9.9:1", true},
		{"surrounding spaces", []keyfuncs.IPOption{keyfuncs.WithTrustedProxies(" 10.0.0.0/8 ")}, "10.9.9.9:1", true},
		{"link-local with zone", []keyfuncs.IPOption{keyfuncs.WithTrustedProxies("fe80::/10")}, "[fe80::1%eth0]:1", true},
		{"::/112 does not cover IPv4", []keyfuncs.IPOption{keyfuncs.WithTrustedProxies("::/112")}, "10.0.0.1:1", false},
		{"::/112 does not cover mapped IPv4", []keyfuncs.IPOption{keyfuncs.WithTrustedProxies("::/112")}, "[::ffff:10.0.0.1]:1", false},
		{"lists add up", []keyfuncs.IPOption{keyfuncs.WithTrustedProxies("10.0.0.0/8"), keyfuncs.WithTrustedProxies("192.0.2.0/24")}, "192.0.2.1:1", true},
		{"netip prefix, mapped", []keyfuncs.IPOption{keyfuncs.WithTrustedProxies(netip.MustParsePrefix("::ffff:10.0.0.0/104").String())}, "10.0.0.1:1", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fn := mustIP(t, tt.opts...)
			got, err := fn(newRequest(tt.peer, hdr{"X-Forwarded-For", "203.0.113.7"}))
			if err != nil {
				t.Fatal(err)
			}
			if (got == "203.0.113.7") != tt.trusted {
				t.Fatalf("key %q: peer trusted = %v, want %v", got, got == "203.0.113.7", tt.trusted)
			}
		})
	}
}

func TestIPConfigErrors(t *testing.T) {
	tests := []struct {
		name string
		opts []keyfuncs.IPOption
	}{
		{"bad CIDR", []keyfuncs.IPOption{keyfuncs.WithTrustedProxies("10.0.0.0/33")}},
		{"not an address", []keyfuncs.IPOption{keyfuncs.WithTrustedProxies("proxy.internal")}},
		{"empty string", []keyfuncs.IPOption{keyfuncs.WithTrustedProxies("")}},
		{"CIDR with zone", []keyfuncs.IPOption{keyfuncs.WithTrustedProxies("fe80::%eth0/64")}},
		{"zero netip prefix", []keyfuncs.IPOption{keyfuncs.WithTrustedProxies(netip.Prefix{}.String())}},
		{"IPv6 prefix 0", []keyfuncs.IPOption{keyfuncs.WithIPv6Prefix(0)}},
		{"IPv6 prefix 129", []keyfuncs.IPOption{keyfuncs.WithIPv6Prefix(129)}},
		{"IPv6 prefix negative", []keyfuncs.IPOption{keyfuncs.WithIPv6Prefix(-64)}},
		{"IPv4 prefix 0", []keyfuncs.IPOption{keyfuncs.WithIPv4Prefix(0)}},
		{"IPv4 prefix 33", []keyfuncs.IPOption{keyfuncs.WithIPv4Prefix(33)}},
		{"Forwarded without trusted proxies", []keyfuncs.IPOption{keyfuncs.WithForwardingHeader("Forwarded")}},
		{"header without trusted proxies", []keyfuncs.IPOption{keyfuncs.WithForwardingHeader("X-Real-IP")}},
		{"XFF without trusted proxies", []keyfuncs.IPOption{keyfuncs.WithForwardingHeader("X-Forwarded-For")}},
		{"empty trusted list and a header", []keyfuncs.IPOption{keyfuncs.WithTrustedProxies(), keyfuncs.WithForwardingHeader("Forwarded")}},
		{"two header kinds", []keyfuncs.IPOption{keyfuncs.WithTrustedProxies("10.0.0.0/8"), keyfuncs.WithForwardingHeader("Forwarded"), keyfuncs.WithForwardingHeader("X-Forwarded-For")}},
		{"two client headers", []keyfuncs.IPOption{keyfuncs.WithTrustedProxies("10.0.0.0/8"), keyfuncs.WithForwardingHeader("X-Real-IP"), keyfuncs.WithForwardingHeader("CF-Connecting-IP")}},
		{"empty header name", []keyfuncs.IPOption{keyfuncs.WithTrustedProxies("10.0.0.0/8"), keyfuncs.WithForwardingHeader("")}},
		{"invalid header name", []keyfuncs.IPOption{keyfuncs.WithTrustedProxies("10.0.0.0/8"), keyfuncs.WithForwardingHeader("X Real IP")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fn, err := keyfuncs.IP(tt.opts...)
			if err == nil {
				t.Fatal("IP accepted invalid options")
			}
			if fn != nil {
				t.Fatal("IP returned a KeyFunc with an error")
			}
			if !strings.HasPrefix(err.Error(), "keyfuncs: ") {
				t.Fatalf("error %q lacks the package prefix", err)
			}
		})
	}
	// Valid edge values and a nil option are accepted.
	for _, opts := range [][]keyfuncs.IPOption{
		{keyfuncs.WithIPv6Prefix(1), keyfuncs.WithIPv4Prefix(1)},
		{keyfuncs.WithIPv6Prefix(128), keyfuncs.WithIPv4Prefix(32)},
		{nil},
		{keyfuncs.WithTrustedProxies()},
		{keyfuncs.WithTrustedProxies("10.0.0.0/8"), keyfuncs.WithForwardingHeader("X-Real-IP"), keyfuncs.WithForwardingHeader("x-real-ip")}, // one header, twice
	} {
		if _, err := keyfuncs.IP(opts...); err != nil {
			t.Errorf("IP(%d options): %v", len(opts), err)
		}
	}
}

// A trusted prefix that covers every address of its family would let every
// client choose its key: IP refuses it, in every spelling.
func TestIPRefusesTrustingEveryone(t *testing.T) {
	for _, opt := range []keyfuncs.IPOption{
		keyfuncs.WithTrustedProxies("0.0.0.0/0"),
		keyfuncs.WithTrustedProxies("::/0"),
		keyfuncs.WithTrustedProxies("10.0.0.0/8", "::/0"),
		keyfuncs.WithTrustedProxies("192.0.2.1/0"), // unmasked
		keyfuncs.WithTrustedProxies("2001:db8::/0"),
		keyfuncs.WithTrustedProxies("::ffff:0.0.0.0/96"), // IPv4-mapped: all of IPv4
		keyfuncs.WithTrustedProxies(" ::ffff:10.0.0.0/96 "),
	} {
		fn, err := keyfuncs.IP(opt)
		if err == nil || fn != nil {
			t.Errorf("IP accepted a prefix covering everyone")
			continue
		}
		if msg := err.Error(); !strings.HasPrefix(msg, "keyfuncs: trusted proxy ") || !strings.Contains(msg, "covers every") {
			t.Errorf("unclear error %q", msg)
		}
	}
	// The mapped form of a real network is accepted, and so is an IPv6
	// prefix that only looks like a mapped one (it covers no IPv4 address).
	for _, cidr := range []string{"::ffff:0.0.0.0/95", "::ffff:10.0.0.0/104"} {
		if _, err := keyfuncs.IP(keyfuncs.WithTrustedProxies(cidr)); err != nil {
			t.Errorf("%s: %v", cidr, err)
		}
	}
}

func TestIPNilRequest(t *testing.T) {
	if _, err := mustIP(t)(nil); err == nil {
		t.Fatal("nil request accepted")
	}
}

// A long client-written prefix is never parsed: the walk stops at the
// client, so it neither fails nor costs a parse per entry.
func TestIPLongForgedPrefix(t *testing.T) {
	fn := mustIP(t, keyfuncs.WithTrustedProxies("10.0.0.0/8"))
	forged := strings.Repeat("garbage, ", 100_000)
	checkKey(t, fn, newRequest("10.0.0.1:1", hdr{"X-Forwarded-For", forged + "203.0.113.7, 10.0.0.2"}), ok, "203.0.113.7")
	r := newRequest("10.0.0.1:1", hdr{"X-Forwarded-For", forged + "203.0.113.7"})
	allocs := testing.AllocsPerRun(20, func() {
		_, _ = fn(r)
	})
	if allocs > 5 {
		t.Fatalf("%v allocations per call: the forged prefix is being processed", allocs)
	}
}

func TestIPConcurrent(t *testing.T) {
	fn := mustIP(t, keyfuncs.WithTrustedProxies("10.0.0.0/8"), keyfuncs.WithForwardingHeader("Forwarded"))
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				k, err := fn(newRequest("10.0.0.1:1", hdr{"Forwarded", `for="[2001:db8::1]:80", for=10.0.0.2`}))
				if err != nil || k != "2001:db8::/56" {
					t.Errorf("key %q, %v", k, err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// With default options, one customer's /56 is one key (issue 20: 2,560
// requests over the 256 /64s of one /56 were served against a limit of 10
// when IPv6 was grouped by /64), and the next /56 is another.
func TestIPDefaultGroupsIPv6By56(t *testing.T) {
	for name, fn := range map[string]core.KeyFunc{
		"peer":   mustIP(t),
		"behind": mustIP(t, keyfuncs.WithTrustedProxies("10.0.0.0/8")),
	} {
		keys := map[string]int{}
		for i := 0; i < 256; i++ {
			addr := netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 0, 7, 0x12, byte(i), byte(i), 1, 2, 3, 4, 5, 6, byte(255 - i)})
			r := newRequest(netip.AddrPortFrom(addr, 443).String())
			if name == "behind" {
				r = newRequest("10.0.0.1:1", hdr{"X-Forwarded-For", addr.String()})
			}
			k, err := fn(r)
			if err != nil {
				t.Fatal(err)
			}
			keys[k]++
		}
		if len(keys) != 1 || keys["2001:db8:7:1200::/56"] != 256 {
			t.Fatalf("%s: the 256 /64s of 2001:db8:7:1200::/56 got keys %v, want one", name, keys)
		}
		checkKey(t, fn, newRequest("[2001:db8:7:1300::1]:1"), ok, "2001:db8:7:1300::/56")
	}
}

// A 6to4 address (2002:V4ADDR::/48) is keyed as the IPv4 address it embeds:
// the host holding 203.0.113.7 holds 2^80 6to4 addresses, which would
// otherwise be 65,536 /64s or 256 /56s.
func TestIP6to4KeyedByEmbeddedIPv4(t *testing.T) {
	fn := mustIP(t, keyfuncs.WithTrustedProxies("10.0.0.0/8"))
	for _, addr := range []string{
		"[2002:cb00:7107::1]:443",
		"[2002:cb00:7107:1::1]:443",
		"[2002:cb00:7107:ffff:ffff:ffff:ffff:ffff]:1",
		"[2002:cb00:7107:8000:1:2:3:4%eth0]:1",
		"203.0.113.7:1",
		"[::ffff:203.0.113.7]:1",
	} {
		checkKey(t, fn, newRequest(addr), ok, "203.0.113.7")
	}
	checkKey(t, fn, newRequest("10.0.0.1:1", hdr{"X-Forwarded-For", "2002:cb00:7107:42::9"}), ok, "203.0.113.7")
	checkKey(t, fn, newRequest("[2002:cb00:7108::1]:1"), ok, "203.0.113.8")
	// WithIPv4Prefix groups the embedded address like any IPv4 address.
	checkKey(t, mustIP(t, keyfuncs.WithIPv4Prefix(24)), newRequest("[2002:cb00:71ff::1]:1"), ok, "203.0.113.0/24")
	// The IPv6 prefix applies to no 6to4 address, whatever its length.
	checkKey(t, mustIP(t, keyfuncs.WithIPv6Prefix(128)), newRequest("[2002:cb00:7107::1]:1"), ok, "203.0.113.7")
	// Neighbours of 2002::/16 are plain IPv6.
	checkKey(t, fn, newRequest("[2003:cb00:7107::1]:1"), ok, "2003:cb00:7107::/56")
}

// A Teredo address (2001:0::/32, RFC 4380) is keyed as its client's public
// IPv4 address, which it stores inverted in its last 32 bits; the server
// address, flags and port the client can vary change nothing.
func TestIPTeredoKeyedByClientIPv4(t *testing.T) {
	fn := mustIP(t)
	for _, addr := range []string{
		"[2001:0:4136:e378:8000:63bf:3fff:fdd2]:1", // RFC 4380's example: client 192.0.2.45, port 40000, server 65.54.227.120
		"[2001:0:4136:e378:8000:1:3fff:fdd2]:1",    // another port
		"[2001:0:c633:6401:0:63bf:3fff:fdd2]:1",    // another server, no cone flag
		"[2001:0:4136:e378:ffff:ffff:3fff:fdd2]:1",
		"192.0.2.45:1",
	} {
		checkKey(t, fn, newRequest(addr), ok, "192.0.2.45")
	}
	checkKey(t, fn, newRequest("[2001:0:4136:e378:8000:63bf:3fff:fdd3]:1"), ok, "192.0.2.44")
	// 2001:db8::/32 and 2001:1::/32 are not Teredo.
	checkKey(t, fn, newRequest("[2001:1:4136:e378:8000:63bf:3fff:fdd2]:1"), ok, "2001:1:4136:e300::/56")
}

// IPv4 clients written as IPv6 by a translator in front of the server
// (NAT64/SIIT: the well-known prefix 64:ff9b::/96, IPv4-translated
// ::ffff:0:0:0/96) or in the deprecated IPv4-compatible form (::/96) are
// keyed by the IPv4 address they embed; grouped by /56, every IPv4 client
// of the translator shared one bucket (issue 29). Inside the local-use
// prefix 64:ff9b:1::/48, where the IPv4 address sits depends on the
// translator's prefix length, each address is its own key.
func TestIPTranslatedKeyedByEmbeddedIPv4(t *testing.T) {
	fn := mustIP(t, keyfuncs.WithTrustedProxies("10.0.0.0/8"))
	for _, tt := range []struct{ peer, key string }{
		{"[64:ff9b::c000:207]:1", "192.0.2.7"},
		{"[64:ff9b::192.0.2.8]:1", "192.0.2.8"},
		{"[::ffff:0:c000:207]:1", "192.0.2.7"},
		{"[::c000:209]:1", "192.0.2.9"},
		{"[64:ff9b:1::c000:207]:1", "64:ff9b:1::c000:207"},       // a /96 translator
		{"[64:ff9b:1::c000:208]:1", "64:ff9b:1::c000:208"},       // its neighbour, apart
		{"[64:ff9b:1:0:c0:2:700:0]:1", "64:ff9b:1:0:c0:2:700:0"}, // a /64 translator: 192.0.2.7 at bits 72-103
		{"[64:ff9b:1:0:c0:2:800:0]:1", "64:ff9b:1:0:c0:2:800:0"},
		{"[::1]:1", "::/56"},                        // loopback, not 0.0.0.1
		{"[64:ff9b::1:c000:207]:1", "64:ff9b::/56"}, // outside the /96: plain IPv6
	} {
		checkKey(t, fn, newRequest(tt.peer), ok, tt.key)
	}
	checkKey(t, fn, newRequest("10.0.0.1:1", hdr{"X-Forwarded-For", "64:ff9b::cb00:7107"}), ok, "203.0.113.7")
	checkKey(t, mustIP(t, keyfuncs.WithIPv4Prefix(24)), newRequest("[64:ff9b::c000:207]:1"), ok, "192.0.2.0/24")
}

// A trusted prefix, or a set of them, covering more public addresses than
// the documented bound lets a large part of the internet choose its key
// (issue 20: "2000::/3", the halves of a family and "::ffff:0.0.0.0/97"
// were accepted). IP refuses them and names the prefix; private, loopback,
// link-local, shared and unique local ranges of any width, and the lists of
// real CDNs, are accepted.
// slash12s returns n distinct public IPv4 /12s, from 16.0.0.0/12.
func slash12s(n int) []string {
	var out []string
	for i := 0; i < n; i++ {
		out = append(out, netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(16 + i/16), byte(i % 16 << 4), 0, 0}), 12).String())
	}
	return out
}

func TestIPRefusesWidePublicTrust(t *testing.T) {
	slash28s := func(n int) []string { // n distinct public IPv6 /28s, from 2400::/28
		var out []string
		for i := 0; i < n; i++ {
			out = append(out, netip.PrefixFrom(netip.AddrFrom16([16]byte{0x24, 0, byte(i >> 4), byte(i % 16 << 4)}), 28).String())
		}
		return out
	}
	every12 := func() []string { // IPv4 in /12 parts: 4,096 of them
		var out []string
		for i := 0; i < 4096; i++ {
			out = append(out, netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(i >> 4), byte(i % 16 << 4), 0, 0}), 12).String())
		}
		return out
	}
	refused := []struct {
		cidrs []string
		names string // what the error must quote
	}{
		{[]string{"2000::/3"}, `"2000::/3"`},
		{[]string{"::/1", "8000::/1"}, `"::/1"`},
		{[]string{"10.0.0.0/8", "8000::/1"}, `"8000::/1"`},
		{[]string{"0.0.0.0/1", "128.0.0.0/1"}, `"0.0.0.0/1"`},
		{[]string{"128.0.0.0/1"}, `"128.0.0.0/1"`},
		{[]string{"::ffff:0.0.0.0/97"}, `"::ffff:0.0.0.0/97" (0.0.0.0/1)`},
		{[]string{"::ffff:128.0.0.0/97", "::ffff:0.0.0.0/97"}, `"::ffff:128.0.0.0/97" (128.0.0.0/1)`},
		{[]string{"10.0.0.0/7"}, `"10.0.0.0/7"`}, // 11.0.0.0/8 is public
		{[]string{"172.0.0.0/8"}, `"172.0.0.0/8"`},
		{[]string{"96.0.0.0/11"}, `"96.0.0.0/11"`},
		{[]string{"2600::/27"}, `"2600::/27"`},
		{[]string{"fc00::/6"}, `"fc00::/6"`}, // f800::/7 is not unique local
		{slash12s(17), `"16.0.0.0/12"`},
		{slash28s(17), `"2400::/28"`},
		{every12(), `"0.0.0.0/12"`},
	}
	for _, tt := range refused {
		fn, err := keyfuncs.IP(keyfuncs.WithTrustedProxies(tt.cidrs...))
		if err == nil || fn != nil {
			t.Errorf("IP accepted %.80v", tt.cidrs)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, tt.names) || !strings.Contains(msg, "public") {
			t.Errorf("%.60v: error %q does not name %s", tt.cidrs, msg, tt.names)
		}
	}
	cloudflare := []string{ // www.cloudflare.com/ips, 2026
		"173.245.48.0/20", "103.21.244.0/22", "103.22.200.0/22", "103.31.4.0/22", "141.101.64.0/18",
		"108.162.192.0/18", "190.93.240.0/20", "188.114.96.0/20", "197.234.240.0/22", "198.41.128.0/17",
		"162.158.0.0/15", "104.16.0.0/13", "104.24.0.0/14", "172.64.0.0/13", "131.0.72.0/22",
		"2400:cb00::/32", "2606:4700::/32", "2803:f800::/32", "2405:b500::/32", "2405:8100::/32",
		"2a06:98c0::/29", "2c0f:f248::/32",
	}
	for _, cidrs := range [][]string{
		cloudflare,
		append([]string{"2600:9000::/28"}, cloudflare...), // and CloudFront's IPv6 prefix
		{"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "::1", "fe80::/10", "fc00::/7"},
		{"fd00::/8", "fc00::/7", "10.0.0.0/8", "10.1.0.0/16"},
		{"16.0.0.0/12"},
		slash12s(16),
		slash28s(16),
		append(slash12s(16), slash12s(16)...), // a prefix listed twice counts once
		append(slash12s(16), "16.0.0.0/16", "10.0.0.0/8", "172.16.0.0/12"),
	} {
		if _, err := keyfuncs.IP(keyfuncs.WithTrustedProxies(cidrs...)); err != nil {
			t.Errorf("%.60v: %v", cidrs, err)
		}
	}
}

// A trusted IPv6 prefix that embeds IPv4 addresses is measured by the IPv4
// space it embeds (issue 29, item 3): 2001::/32 is 2^96 of IPv6, within the
// /28 bound, but every IPv4 host can take a Teredo address (with 2001::/32
// trusted, 100 requests with a rotating X-Forwarded-For got 100 served
// against 1 an hour), and a NAT64 or SIIT translator writes every IPv4
// client into its prefix.
func TestIPRefusesWideEmbeddedTrust(t *testing.T) {
	every := []string{
		"2001::/32",             // Teredo
		"2001:0:4136:e378::/64", // one Teredo server: its clients are every IPv4 host
		"2001::/31",
		"64:ff9b::/96",        // NAT64 well-known prefix
		"64:ff9b:1::/48",      // local-use translation prefix
		"64:ff9b:1:abcd::/96", // a translator inside it
		"::ffff:0:0:0/96",     // SIIT IPv4-translated
		"::/96",               // IPv4-compatible
		"::/64",               // holds several of them
		"2002::/16",           // 6to4 (also too wide as IPv6)
	}
	for _, cidr := range every {
		fn, err := keyfuncs.IP(keyfuncs.WithTrustedProxies(cidr))
		if err == nil || fn != nil {
			t.Errorf("IP accepted %s", cidr)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, strconv.Quote(cidr)) || !strings.Contains(msg, "IPv") {
			t.Errorf("%s: unclear error %q", cidr, msg)
		}
	}
	for cidr, want := range map[string]string{
		"2002::/27":          "0.0.0.0/11 in the form of 6to4",             // 2^21 hosts
		"2002:c000::/24":     "192.0.0.0/8 in the form of 6to4",            // 2^24 less 192.168.0.0/16
		"64:ff9b::/104":      "0.0.0.0/8 in the form of the NAT64",         // 2^24
		"2001::f000:0/100":   "0.0.0.0/4 in the form of Teredo",            // stored inverted: 0fff… → 0.0.0.0/4
		"::ffff:0:c000:0/98": "192.0.0.0/2 in the form of IPv4-translated", // 2^30
	} {
		_, err := keyfuncs.IP(keyfuncs.WithTrustedProxies(cidr))
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "public IPv4") {
			t.Errorf("%s: error %v, want one naming %s", cidr, err, want)
		}
	}
	// IPv4 prefixes and the IPv4 space embedded by IPv6 ones count
	// together, a space trusted in both forms once.
	if _, err := keyfuncs.IP(keyfuncs.WithTrustedProxies(append(slash12s(16), "2002:7000::/28")...)); err == nil {
		t.Error("IP accepted 16 IPv4 /12s and a 6to4 /28 (a 17th /12)")
	}
	if _, err := keyfuncs.IP(keyfuncs.WithTrustedProxies(append(slash12s(16), "2002:1000::/28", "64:ff9b::1000:0/108")...)); err != nil {
		t.Errorf("16.0.0.0/12 in three forms: %v", err)
	}
	// Narrow prefixes of these ranges pass: one 6to4 host, a /24 behind a
	// translator, one Teredo client, loopback; and 2002::/28, which embeds
	// 0.0.0.0/12, as many IPv4 hosts as 16.0.0.0/12.
	for _, cidr := range []string{"2002:cb00:7107::/48", "64:ff9b::cb00:7100/120", "2001:0:4136:e378:8000:63bf:3fff:fdd2",
		"64:ff9b:1::c000:200/120", "::1", "::ffff:0:c000:200/120", "2002::/28", "2001:db8::/32"} {
		if _, err := keyfuncs.IP(keyfuncs.WithTrustedProxies(cidr)); err != nil {
			t.Errorf("%s: %v", cidr, err)
		}
	}
}

// forgedPrefix returns about size bytes of client-written forwarding
// entries in the syntax of header ("X-Forwarded-For" or "Forwarded"),
// ending in ", " so that a proxy's entry can follow; with malformed, they
// include malformed ones (garbage, an open quote) to show they are never
// read.
func forgedPrefix(header string, size int, malformed bool) string {
	unit := "198.51.100.9, [2001:db8::9]:1, "
	if header == "Forwarded" {
		unit = `for=198.51.100.9;proto=https, for="[2001:db8::9]:1", by=x;for=_hidden, `
	}
	if malformed {
		unit += `garbage, for="open, `
	}
	return strings.Repeat(unit, size/len(unit)+1)
}

// The work of a walk does not grow with what the client prepends (issue
// 20: Forwarded parsing cost 157 µs at 8 KB and 19 ms at 1 MB, one
// allocation or more per element): a 1 MB prefix costs the allocations a
// 1 KB one does, a handful, and the key is the proxy's entry.
func TestIPForwardingWalkBounded(t *testing.T) {
	for _, header := range []string{"X-Forwarded-For", "Forwarded"} {
		opts := []keyfuncs.IPOption{keyfuncs.WithTrustedProxies("10.0.0.0/8")}
		appended := "203.0.113.7, 10.0.0.2"
		if header == "Forwarded" {
			opts = append(opts, keyfuncs.WithForwardingHeader("Forwarded"))
			appended = `for="203.0.113.7:4711";proto=https, for=10.0.0.2`
		}
		fn := mustIP(t, opts...)
		allocs := map[int]float64{}
		for _, malformed := range []bool{false, true} {
			for _, size := range []int{1 << 10, 1 << 20} {
				r := newRequest("10.0.0.1:1", hdr{header, forgedPrefix(header, size, malformed) + appended})
				checkKey(t, fn, r, ok, "203.0.113.7")
				allocs[size] = testing.AllocsPerRun(10, func() { _, _ = fn(r) })
			}
			if allocs[1<<20] != allocs[1<<10] || allocs[1<<20] > 4 {
				t.Errorf("%s: %v allocations with a 1 KB prefix, %v with 1 MB; want the same few", header, allocs[1<<10], allocs[1<<20])
			}
		}
	}
}

// A client inside the trusted network (all its entries trusted) makes IP
// read at most 32 entries, not every one it prepends: the key is the
// left-most of the 32 right-most.
func TestIPForwardingWalkHopLimit(t *testing.T) {
	for _, header := range []string{"X-Forwarded-For", "Forwarded"} {
		opts := []keyfuncs.IPOption{keyfuncs.WithTrustedProxies("10.0.0.0/8")}
		entry := func(a string) string { return a }
		if header == "Forwarded" {
			opts = append(opts, keyfuncs.WithForwardingHeader("Forwarded"))
			entry = func(a string) string { return "for=" + a }
		}
		var tail []string
		for i := 40; i >= 1; i-- {
			tail = append(tail, entry(fmt.Sprintf("10.0.0.%d", i)))
		}
		prefix := strings.Repeat(entry("10.9.9.9")+", ", 1<<20/16)
		r := newRequest("10.0.0.1:1", hdr{header, prefix + strings.Join(tail, ", ")})
		checkKey(t, mustIP(t, opts...), r, ok, "10.0.0.32")
		// Empty elements and blank lines count too.
		r = newRequest("10.0.0.1:1", hdr{header, entry("10.9.9.9")}, hdr{header, strings.Repeat(", ", 1<<19)}, hdr{header, " "})
		checkKey(t, mustIP(t, opts...), r, ok, "10.0.0.1")
		// Fewer than 32 trusted entries: the left-most, as always.
		r = newRequest("10.0.0.1:1", hdr{header, strings.Join(tail[30:], ", ")})
		checkKey(t, mustIP(t, opts...), r, ok, "10.0.0.10")
	}
}

// BenchmarkIPForwardingPrefix: the cost of a key behind a trusted proxy
// with 8 KB and 1 MB of client-written entries before the proxy's own.
func BenchmarkIPForwardingPrefix(b *testing.B) {
	for _, header := range []string{"X-Forwarded-For", "Forwarded"} {
		opts := []keyfuncs.IPOption{keyfuncs.WithTrustedProxies("10.0.0.0/8")}
		appended := "203.0.113.7"
		if header == "Forwarded" {
			opts = append(opts, keyfuncs.WithForwardingHeader("Forwarded"))
			appended = "for=203.0.113.7"
		}
		fn := mustIP(b, opts...)
		for _, size := range []int{8 << 10, 1 << 20} {
			r := newRequest("10.0.0.1:1", hdr{header, forgedPrefix(header, size, false) + appended})
			b.Run(fmt.Sprintf("%s/%dKB", header, size>>10), func(b *testing.B) {
				b.ReportAllocs()
				for i := 0; i < b.N; i++ {
					if k, err := fn(r); err != nil || k != "203.0.113.7" {
						b.Fatal(k, err)
					}
				}
			})
		}
	}
}

// The Limiter's per-address bucket for requests without a key
// (internal/clientaddr) groups peers as IP does by default.
func TestDefaultGroupsMatchKeyErrorBuckets(t *testing.T) {
	fn := mustIP(t)
	for _, peer := range []string{
		"203.0.113.7:1", "[::ffff:203.0.113.7]:1", "[2001:db8:1:2ff::1]:1", "[2001:db8:1:3ff::1]:1",
		"[fe80::1%eth0]:1", "[2002:c000:207::1]:1", "[2001:0:4136:e378:8000:63bf:3fff:fdd2]:1",
	} {
		got, err := fn(newRequest(peer))
		want, ok := clientaddr.PeerKey(peer)
		if err != nil || !ok || got != want {
			t.Errorf("%s: IP key %q (%v), key-error bucket %q (%v)", peer, got, err, want, ok)
		}
	}
}
