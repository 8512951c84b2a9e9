package storetest

import (
	"testing"
	"time"
)

// On a wall clock a case may run up to its margin late and still be
// judged, so the margin must stay below the time one unit of each of its
// limits takes to come back (P/R): a run that late must not have been
// given a unit its figures do not count.
func TestMarginBelowStep(t *testing.T) {
	for _, sc := range scenarios() {
		for _, l := range sc.limits {
			if step := l.Period / time.Duration(l.Rate); sc.margin >= step {
				t.Errorf("%s: margin %v, want below the step %v of %v", sc.name, sc.margin, step, l)
			}
		}
	}
	// The wall-clock seed case: a request up to seedMargin late stays in
	// its second.
	for sec, k := range seedWallClock().traffic {
		if k == 0 {
			continue
		}
		if room := time.Duration(sec+1)*time.Second - seedAt(sec, k-1, k); seedMargin >= room {
			t.Errorf("seed: margin %v, want below the %v second %d leaves after its last request", seedMargin, room, sec+1)
		}
	}
	for _, c := range ttlCases() {
		for _, l := range c.limits {
			if step := l.Period / time.Duration(l.Rate); ttlMargin >= step {
				t.Errorf("TTL/%s: margin %v, want below the step %v of %v", c.name, ttlMargin, step, l)
			}
		}
	}
}
