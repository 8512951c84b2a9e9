package keyfuncs_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfuncs"
)

// hostileSecret is the HMAC secret of the JWT key function under fuzz.
var hostileSecret = []byte("fuzz-hostile-secret-0123456789abcdef")

// hostileNow is the fixed clock of FuzzJWTHostile.
var hostileNow = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// hostileToken assembles a compact JWS from raw header and payload JSON,
// with a signature chosen by mode: 0 HMAC-SHA256 under hostileSecret, 1
// HMAC-SHA256 under another secret, 2 none, 3 the bytes of sig.
func hostileToken(header, payload string, mode uint8, sig string) string {
	enc := base64.RawURLEncoding
	signing := enc.EncodeToString([]byte(header)) + "." + enc.EncodeToString([]byte(payload))
	switch mode % 4 {
	case 0, 1:
		secret := hostileSecret
		if mode%4 == 1 {
			secret = []byte("not-the-secret-0123456789abcdefghijkl")
		}
		m := hmac.New(sha256.New, secret)
		m.Write([]byte(signing))
		return signing + "." + enc.EncodeToString(m.Sum(nil))
	case 2:
		return signing + "."
	default:
		return signing + "." + sig
	}
}

// FuzzJWTHostile feeds the JWT key function tokens with arbitrary headers,
// claims and signatures, and arbitrary Authorization values. A key comes
// out only for a token signed with the secret under HS256 whose claims are
// valid at the clock (exp in the future, nbf and iat not), and it is then
// the sub claim; every token not signed with the secret (another secret,
// alg none, a forged or empty signature) is an error wrapping
// ErrInvalidToken and never core.ErrNoKey, so that it can neither pick a
// bucket nor pass for an anonymous request.
func FuzzJWTHostile(f *testing.F) {
	exp := hostileNow.Add(time.Hour).Unix()
	past := hostileNow.Add(-time.Hour).Unix()
	hs := `{"alg":"HS256","typ":"JWT"}`
	for _, s := range []struct {
		header, payload string
		mode            uint8
		sig, raw        string
	}{
		{hs, `{"sub":"victim","exp":` + itoa(exp) + `}`, 0, "", "Bearer x"},
		{hs, `{"sub":"victim","exp":` + itoa(exp) + `}`, 1, "", "bearer  a.b.c"},
		{hs, `{"sub":"victim","exp":` + itoa(past) + `}`, 0, "", "Basic dXNlcjpwYXNz"},
		{`{"alg":"none"}`, `{"sub":"victim","exp":` + itoa(exp) + `}`, 2, "", "Bearer eyJhbGciOiJub25lIn0.eyJzdWIiOiJ2In0."},
		{`{"alg":"HS512"}`, `{"sub":"victim","exp":` + itoa(exp) + `}`, 0, "", ""},
		{`{"alg":"RS256"}`, `{"sub":"victim","exp":` + itoa(exp) + `}`, 0, "", "Bearer ..."},
		{hs, `{"sub":"victim","exp":` + itoa(exp) + `,"nbf":` + itoa(exp) + `}`, 0, "", "Bearer \x00"},
		{hs, `{"sub":42,"exp":` + itoa(exp) + `}`, 0, "", "Bearer a.b"},
		{hs, `{"sub":{"x":1},"exp":` + itoa(exp) + `}`, 0, "", "Bearer " + strings.Repeat("A", 10000)},
		{hs, `{"sub":"victim"}`, 0, "", "Bearer e30.e30.e30"},
		{hs, `{"sub":"victim","exp":` + itoa(exp) + `}`, 3, "forged", "Bearer  "},
		{hs, `not json`, 0, "", "Bearer"},
	} {
		f.Add(s.header, s.payload, s.mode, s.sig, s.raw)
	}
	key, err := keyfuncs.JWT("sub", keyfuncs.HMACSecret(hostileSecret), keyfuncs.WithClock(func() time.Time { return hostileNow }))
	if err != nil {
		f.Fatal(err)
	}
	// The oracle is not vacuous: a well-signed, valid token does yield its sub.
	good := httptest.NewRequest("GET", "/", nil)
	good.Header.Set("Authorization", "Bearer "+hostileToken(hs, `{"sub":"victim","exp":`+itoa(exp)+`}`, 0, ""))
	if k, err := key(good); k != "victim" || err != nil {
		f.Fatalf("valid token: key %q, %v; want victim", k, err)
	}
	f.Fuzz(func(t *testing.T, header, payload string, mode uint8, sig, raw string) {
		tok := hostileToken(header, payload, mode, sig)
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("Authorization", "Bearer "+tok)
		k, err := key(r)
		if (k == "") == (err == nil) {
			t.Fatalf("key %q with error %v: want exactly one of them", k, err)
		}
		if mode%4 != 0 {
			if err == nil {
				t.Fatalf("token not signed with the secret (mode %d) gave key %q", mode%4, k)
			}
			if !errors.Is(err, keyfuncs.ErrInvalidToken) || errors.Is(err, core.ErrNoKey) {
				t.Fatalf("token not signed with the secret: error %v, want ErrInvalidToken and not ErrNoKey", err)
			}
		}
		if err == nil {
			var h struct {
				Alg string `json:"alg"`
			}
			if json.Unmarshal([]byte(header), &h) != nil || h.Alg != "HS256" {
				t.Fatalf("key %q from a token whose header %q is not HS256", k, header)
			}
			var c map[string]any
			d := json.NewDecoder(strings.NewReader(payload))
			d.UseNumber()
			if d.Decode(&c) != nil {
				t.Fatalf("key %q from unparsable claims %q", k, payload)
			}
			if e, ok := c["exp"].(json.Number); !ok || !after(e, hostileNow) {
				t.Fatalf("key %q from a token without a future exp: %q", k, payload)
			}
			switch sub := c["sub"].(type) {
			case string: // as is, a leading '#' doubled
				want := sub
				if strings.HasPrefix(sub, "#") {
					want = "#" + sub
				}
				if k != want {
					t.Fatalf("key %q, sub %q", k, sub)
				}
			case json.Number: // '#' and its text
				if "#"+sub.String() != k {
					t.Fatalf("key %q, sub %s", k, sub)
				}
			default:
				t.Fatalf("key %q, sub %v", k, sub)
			}
		}

		// Any Authorization value at all: never a key without the secret.
		r = httptest.NewRequest("GET", "/", nil)
		r.Header["Authorization"] = []string{raw}
		if k, err := key(r); err == nil {
			t.Fatalf("Authorization %q gave key %q", raw, k)
		}
	})
}

func itoa(n int64) string { b, _ := json.Marshal(n); return string(b) }

// after reports whether the NumericDate n lies after now.
func after(n json.Number, now time.Time) bool {
	f, err := n.Float64()
	return err == nil && f > float64(now.Unix())
}

// FuzzIPBehindProxy: behind a trusted proxy that appends (or sets) the
// address of its peer, whatever the client wrote into X-Forwarded-For or
// Forwarded before it, the key is the address the proxy saw, in its group,
// even when the client's part of a Forwarded line is malformed (it is
// never read): a client can neither pick its bucket nor spend a victim's. Two clients
// share a key exactly when they are in one group: one /56 for IPv6, one
// IPv4 address for IPv4 and for the 6to4, Teredo, NAT64, SIIT and
// IPv4-compatible addresses embedding it.
func FuzzIPBehindProxy(f *testing.F) {
	f.Add("198.51.100.1, 203.0.113.9", `for=203.0.113.9`, []byte{203, 0, 113, 7}, []byte{203, 0, 113, 8})
	f.Add("", "", []byte{0x20, 0x01, 0x0d, 0xb8, 0, 1, 0, 2, 1, 2, 3, 4, 5, 6, 7, 8}, []byte{0x20, 0x01, 0x0d, 0xb8, 0, 1, 0, 2, 9, 9, 9, 9, 9, 9, 9, 9})
	f.Add("unknown, _hidden, [::1]:80, garbage", `for="_x";by=a, for=unknown`, []byte{11, 0, 0, 5}, []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 11, 0, 0, 5})
	f.Add("a\"b", `for="[2001:db8::1]:443", for`, []byte{0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}, []byte{1})
	f.Add("10.0.0.1", `for="1.2.3.4`, []byte{192, 0, 2, 1}, []byte{192, 0, 2, 1})
	f.Add("", "", []byte{0x20, 0x01, 0x0d, 0xb8, 0, 1, 0, 2, 1, 2, 3, 4, 5, 6, 7, 8}, []byte{0x20, 0x01, 0x0d, 0xb8, 0, 1, 0, 0xff, 9, 9, 9, 9, 9, 9, 9, 9})
	f.Add("", "", []byte{0x20, 0x02, 203, 0, 113, 7, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1}, []byte{203, 0, 113, 7})
	f.Add("", "", []byte{0x20, 0x01, 0, 0, 0x41, 0x36, 0xe3, 0x78, 0x80, 0, 0x63, 0xbf, 0x3f, 0xff, 0xfd, 0xd2}, []byte{192, 0, 2, 45})
	f.Add("", "", []byte{0x20, 0x01, 0, 0, 1, 2, 3, 4, 0, 0, 0, 1, 0x3f, 0xff, 0xfd, 0xd2}, []byte{0x20, 0x02, 192, 0, 2, 45, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 1})
	f.Add("", "", []byte{0, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0, 192, 0, 2, 45}, []byte{0, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0, 192, 0, 2, 46})
	f.Add("", "", []byte{0, 0x64, 0xff, 0x9b, 0, 1, 0, 0, 0, 0, 0, 0, 192, 0, 2, 45}, []byte{0, 0x64, 0xff, 0x9b, 0, 1, 0, 0, 0, 0, 0, 0, 192, 0, 2, 46})
	f.Add("", "", []byte{0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0, 192, 0, 2, 45}, []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 192, 0, 2, 45})
	f.Add("", "", []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}, []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2})
	trusted := netip.MustParsePrefix("10.0.0.0/8")
	opts := keyfuncs.WithTrustedProxies(trusted.String())
	fns := map[string]core.KeyFunc{}
	for name, extra := range map[string][]keyfuncs.IPOption{
		"xff": nil, "forwarded": {keyfuncs.WithForwardingHeader("Forwarded")}, "real-ip": {keyfuncs.WithForwardingHeader("X-Real-IP")},
	} {
		fn, err := keyfuncs.IP(append([]keyfuncs.IPOption{opts}, extra...)...)
		if err != nil {
			f.Fatal(err)
		}
		fns[name] = fn
	}
	f.Fuzz(func(t *testing.T, forgedXFF, forgedFwd string, a, b []byte) {
		ca, okA := netip.AddrFromSlice(a)
		cb, okB := netip.AddrFromSlice(b)
		if !okA || !okB {
			return
		}
		ca, cb = ca.Unmap(), cb.Unmap()
		if trusted.Contains(ca) {
			return // a trusted hop, not a client
		}
		want := groupKey(ca)
		host := ca.String()
		if ca.Is6() {
			host = "[" + host + "]"
		}
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = "10.1.2.3:443"
		r.Header["X-Forwarded-For"] = []string{forgedXFF + ", " + ca.String()}
		r.Header["Forwarded"] = []string{forgedFwd + `, for="` + host + `"`}
		r.Header["X-Real-Ip"] = []string{ca.String()}
		for name, fn := range fns {
			k, err := fn(r)
			if err != nil || k != want {
				t.Fatalf("%s: key %q, %v; want the proxy's peer %q (forged %q, %q)", name, k, err, want, forgedXFF, forgedFwd)
			}
		}
		if cb.IsValid() {
			group := groupOf(ca) == groupOf(cb)
			if same := groupKey(cb) == want; same != group {
				t.Fatalf("%v and %v: same key %v, same group %v", ca, cb, same, group)
			}
			r.RemoteAddr = netip.AddrPortFrom(cb, 1).String()
			if k, err := fns["xff"](r); !trusted.Contains(cb) && (err != nil || k != groupKey(cb)) {
				t.Fatalf("untrusted peer %v with forged headers: key %q, %v; want %q", cb, k, err, groupKey(cb))
			}
		}
	})
}

// groupOf is the group of the client address a under IP's documented
// defaults: the IPv4 address (embedded in a 6to4, Teredo, NAT64, SIIT or
// IPv4-compatible address, or not), an address of 64:ff9b:1::/48 on its
// own, or the IPv6 /56.
func groupOf(a netip.Addr) netip.Prefix {
	b := a.AsSlice()
	switch {
	case netip.MustParsePrefix("2002::/16").Contains(a):
		a = netip.AddrFrom4([4]byte(b[2:6]))
	case netip.MustParsePrefix("2001::/32").Contains(a):
		a = netip.AddrFrom4([4]byte{b[12] ^ 0xff, b[13] ^ 0xff, b[14] ^ 0xff, b[15] ^ 0xff})
	case netip.MustParsePrefix("64:ff9b:1::/48").Contains(a):
		return netip.PrefixFrom(a, 128)
	case netip.MustParsePrefix("64:ff9b::/96").Contains(a), netip.MustParsePrefix("::ffff:0:0:0/96").Contains(a),
		netip.MustParsePrefix("::/96").Contains(a) && b[12] != 0:
		a = netip.AddrFrom4([4]byte(b[12:16]))
	}
	if a.Is4() {
		return netip.PrefixFrom(a, 32)
	}
	p, _ := a.Prefix(56)
	return p
}

// groupKey is IP's documented default key for the client address a: the
// text of its group, the bare address for IPv4.
func groupKey(a netip.Addr) string {
	if p := groupOf(a); p.Addr().Is4() || p.IsSingleIP() {
		return p.Addr().String()
	}
	return groupOf(a).String()
}
