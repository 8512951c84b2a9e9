package storekey

import (
	"strings"
	"testing"
)

// sinkName keeps Name's result alive in an allocation count.
var sinkName string

func TestName(t *testing.T) {
	long := strings.Repeat("n", MaxName)
	for _, c := range []struct {
		key, name string
		ok        bool
	}{
		{"5:login:203.0.113.9", "login", true},
		{"5:login!p:203.0.113.9", "login", true},
		{"5:login!", "login", true},
		{"5:login:", "login", true},
		{"3:a:b:c", "a:b", true}, // the name may hold the separators
		{"1:::", ":", true},
		{"128:" + long + ":k", long, true},
		{"129:" + long + "n:k", "", false}, // longer than any Limiter's name
		{"5:login", "", false},             // no byte after the name
		{"5:login?x", "", false},
		{"05:login:x", "", false}, // a leading zero
		{"0::x", "", false},
		{"1000:x", "", false},
		{":login:x", "", false},
		{"login", "", false},
		{"", "", false},
		{"9", "", false},
		{"9:", "", false},
	} {
		name, n, ok := Name(c.key)
		if name != c.name || ok != c.ok {
			t.Errorf("Name(%.20q) = %q, %v; want %q, %v", c.key, name, ok, c.name, c.ok)
		}
		if ok && (n != len(Prefix(name)) || (c.key[:n] != Prefix(name) && c.key[:n] != KeylessPrefix(name))) {
			t.Errorf("Name(%.20q): prefix length %d, want that of %q", c.key, n, Prefix(name))
		}
	}
	if a := testing.AllocsPerRun(100, func() { sinkName, _, _ = Name("5:login:203.0.113.9") }); a != 0 {
		t.Errorf("Name allocates %v times", a)
	}
}

// Every key a Limiter builds reads back as its name, whatever its client
// key; a key read as a Limiter's starts with that Limiter's prefix.
func FuzzName(f *testing.F) {
	f.Add("login", "203.0.113.9", "5:login:x")
	f.Add("a:b", "c", "3:a:b!")
	f.Add("x", "", "0:x")
	f.Fuzz(func(t *testing.T, name, client, key string) {
		if name != "" && len(name) <= MaxName {
			for _, p := range []string{Prefix(name), KeylessPrefix(name)} {
				got, n, ok := Name(p + client)
				if !ok || got != name || n != len(p) {
					t.Fatalf("Name(%q) = %q, %d, %v; want %q, %d", p+client, got, n, ok, name, len(p))
				}
			}
		}
		if got, n, ok := Name(key); ok {
			if p := key[:n]; p != Prefix(got) && p != KeylessPrefix(got) {
				t.Fatalf("Name(%q) = %q, %d: not that name's prefix", key, got, n)
			}
		}
	})
}
