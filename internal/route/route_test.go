package route

import "testing"

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
