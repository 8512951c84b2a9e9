package keyfuncs

import (
	"fmt"
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

// allForwarded parses a whole line with lastForwarded, element by element
// from the right, and returns its non-empty elements left to right.
func allForwarded(line string) ([]forwardedElement, error) {
	var elems []forwardedElement
	for rest := line; ; {
		e, left, ok, err := lastForwarded(rest)
		if err != nil {
			return nil, err
		}
		if !ok {
			break
		}
		if len(left) >= len(rest) {
			return nil, fmt.Errorf("no progress at %q", rest)
		}
		if !e.empty {
			elems = append([]forwardedElement{e}, elems...)
		}
		rest = left
	}
	return elems, nil
}

// FuzzParseForwarded: read from the right, a line splits as the reference
// left-to-right parser splits it whenever that one accepts it (a repeated
// extension parameter aside); the element a proxy appends is read exactly
// as written, whatever precedes it; and parsed elements written back parse
// the same.
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
		`for="a\`,
		`for="a\"`,
		`"`,
		`\"`,
		`for="x", for="y\\"`,
		`a=b=c`,
		`for="[::1]";proto=https;by="\;x"`,
		"  ,  , for=1.2.3.4 ,",
		`x=1;x=2`,
	} {
		f.Add(s, "203.0.113.7")
	}
	f.Add(`for="`, `[2001:db8::1]:443`)
	f.Add(`for=x\`, `"\`)
	f.Fuzz(func(t *testing.T, line, client string) {
		elems, err := allForwarded(line)
		if ref, refErr := refParseForwarded(line); refErr == nil {
			if err != nil {
				t.Fatalf("%q: the reference parses %+v, lastForwarded fails: %v", line, ref, err)
			}
			if len(ref) != len(elems) {
				t.Fatalf("%q: %d elements, the reference %d", line, len(elems), len(ref))
			}
			for i := range ref {
				if ref[i] != elems[i] {
					t.Fatalf("%q: element %d %+v, the reference %+v", line, i, elems[i], ref[i])
				}
			}
		}
		// A proxy appends a well-formed element: it is read as written.
		appended := line + ", for=" + quoteForwarded(client) + ";proto=https"
		e, _, ok, err := lastForwarded(appended)
		if err != nil || !ok || !e.hasFor || e.forValue != client {
			if plainQdtextOrEscapable(client) {
				t.Fatalf("%q: last element %+v, %v; want for=%q", appended, e, err, client)
			}
		}
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
		again, err := allForwarded(strings.Join(parts, ", "))
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

// plainQdtextOrEscapable reports whether s can be written as a
// quoted-string: no control bytes but HTAB.
func plainQdtextOrEscapable(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c != '\t' && (c < 0x20 || c == 0x7f) {
			return false
		}
	}
	return true
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
