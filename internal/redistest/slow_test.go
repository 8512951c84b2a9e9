package redistest

import "testing"

func TestFull(t *testing.T) {
	for _, c := range []struct {
		ci, full string
		want     bool
	}{
		{"", "", false},
		{"false", "0", false},
		{"true", "", true},
		{"", "1", true},
		{"", "true", true},
		{"", "yes", false},
		{"true", "0", true},
	} {
		t.Setenv("CI", c.ci)
		t.Setenv("SLUICE_FULL", c.full)
		if got := Full(); got != c.want {
			t.Errorf("CI=%q SLUICE_FULL=%q: Full() = %v, want %v", c.ci, c.full, got, c.want)
		}
	}
}
