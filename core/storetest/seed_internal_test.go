package storetest

import "testing"

// checkTrailingSpans reports a trailing span that holds more than r
// admissions wherever each lies within its Take, and nothing when their
// times could place them apart.
func TestCheckTrailingSpans(t *testing.T) {
	const p, r = 1000, 2
	for _, c := range []struct {
		name  string
		spans []span
		fail  bool
	}{
		{"three within p", []span{{0, 10}, {400, 410}, {900, 910}}, true},
		{"the first leaves in time", []span{{0, 10}, {400, 410}, {1010, 1020}}, false},
		// The third may have run at 1009 while the first ran at 9: p apart.
		{"uncertain", []span{{0, 10}, {400, 410}, {1005, 1020}}, false},
		{"a violation at some times only", []span{{0, 10}, {400, 410}, {980, 1009}}, false},
		{"at most r", []span{{0, 10}, {900, 910}}, false},
	} {
		if err := checkTrailingSpans(c.spans, p, r); (err != nil) != c.fail {
			t.Errorf("%s: %v, want failure %v", c.name, err, c.fail)
		}
	}
}
