package adapteropt

import (
	"fmt"
	"testing"
)

func TestApply(t *testing.T) {
	if c := Apply[func() int](nil); c.OnRefuse != nil {
		t.Error("Apply(nil): OnRefuse set")
	}
	first, second := func() int { return 1 }, func() int { return 2 }
	c := Apply([]Option[func() int]{OnRefuse(first), nil, OnRefuse(second)})
	if c.OnRefuse == nil || c.OnRefuse() != 2 {
		t.Error("Apply: the later OnRefuse does not win, or a nil option is not skipped")
	}
}

func TestPattern(t *testing.T) {
	for _, tt := range []struct{ method, path, want string }{
		{"GET", "/users/:id", "GET /users/:id"},
		{"POST", "/users/:id", "POST /users/:id"},
		{"GET", "", ""},
	} {
		if got := Pattern(tt.method, tt.path); got != tt.want {
			t.Errorf("Pattern(%q, %q) = %q, want %q", tt.method, tt.path, got, tt.want)
		}
	}
}

// Kept patterns are returned without allocating; many pairs (more than
// the table holds) still get their right pattern.
func TestPatternKept(t *testing.T) {
	if got := Pattern("GET", "/kept/:id"); got != "GET /kept/:id" {
		t.Fatalf("Pattern = %q", got)
	}
	if allocs := testing.AllocsPerRun(100, func() { _ = Pattern("GET", "/kept/:id") }); allocs != 0 {
		t.Fatalf("%v allocations for a kept pattern", allocs)
	}
	for i := 0; i < 4*patternSlots; i++ {
		method, path := fmt.Sprintf("M%d", i%7), fmt.Sprintf("/r%d/:id", i)
		for range 2 {
			if got := Pattern(method, path); got != method+" "+path {
				t.Fatalf("Pattern(%q, %q) = %q", method, path, got)
			}
		}
	}
}

// BenchmarkPattern: a kept pattern against building one.
func BenchmarkPattern(b *testing.B) {
	b.Run("kept", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			_ = Pattern("GET", "/users/:id")
		}
	})
	b.Run("built", func(b *testing.B) {
		b.ReportAllocs()
		method, path := "GET", "/users/:id"
		var sink string
		for i := 0; i < b.N; i++ {
			sink = method + " " + path
		}
		_ = sink
	})
}
