package adapteropt

import "testing"

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
