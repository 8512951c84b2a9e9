package keyfuncs

import (
	"strings"
	"testing"
)

// quoteForwarded writes s as an RFC 7239 quoted-string.
func quoteForwarded(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		if s[i] == '"' || s[i] == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	b.WriteByte('"')
	return b.String()
}

func FuzzParseForwarded(f *testing.F) {
	for _, s := range []string{
		"for=192.0.2.43",
		`for="[2001:db8:cafe::17]:4711"`,
		"for=192.0.2.60;proto=http;by=203.0.113.43",
		"for=192.0.2.43, for=198.51.100.17",
		`for="_gazonk"`,
		`For="\"quoted\" \\ back"; proto=https ,, ;`,
		`for="unterminated`,
		"for=a;for=b",
		"=x",
		"for=\"\x01\"",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		elems, err := parseForwarded(line)
		if err != nil {
			return
		}
		// Writing the elements back and parsing again gives the same for= values.
		parts := make([]string, len(elems))
		for i, e := range elems {
			if e.hasFor {
				parts[i] = "for=" + quoteForwarded(e.forValue)
			} else {
				parts[i] = "proto=http"
			}
		}
		again, err := parseForwarded(strings.Join(parts, ", "))
		if err != nil {
			t.Fatalf("re-encoded %q of %q: %v", strings.Join(parts, ", "), line, err)
		}
		if len(again) != len(elems) {
			t.Fatalf("%d elements, then %d", len(elems), len(again))
		}
		for i := range elems {
			if again[i] != elems[i] {
				t.Fatalf("element %d: %+v, then %+v", i, elems[i], again[i])
			}
		}
	})
}

func FuzzParseNode(f *testing.F) {
	for _, s := range []string{
		"192.0.2.1", "192.0.2.1:80", "[2001:db8::1]:443", "2001:db8::1", "::ffff:10.0.0.1",
		"[fe80::1%eth0]:80", "fe80::1%25eth0", "[::1]", "[1.2.3.4]:_obf", "unknown", "1.2.3.4:65536",
	} {
		f.Add(s, false)
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, s string, obfuscatedPort bool) {
		a, err := parseNode(s, obfuscatedPort)
		if err != nil {
			return
		}
		if !a.IsValid() || a.Zone() != "" || a.Is4In6() {
			t.Fatalf("parseNode(%q) = %v: not normalised", s, a)
		}
		b, err := parseNode(a.String(), false)
		if err != nil || b != a {
			t.Fatalf("parseNode(%q) = %v, but parseNode(%q) = %v, %v", s, a, a.String(), b, err)
		}
	})
}
