package storetest

import (
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/store"
)

// keySet returns the backend's keys now (nil when Harness.Keys is nil).
func (s *suite) keySet(tb testing.TB) map[string]bool {
	if s.h.Keys == nil {
		return nil
	}
	set := make(map[string]bool)
	for _, k := range s.h.Keys(tb) {
		set[k.Key] = true
	}
	return set
}

// newKeys returns the keys the backend holds now that were not in before.
func (s *suite) newKeys(tb testing.TB, before map[string]bool) []KeyTTL {
	var out []KeyTTL
	for _, k := range s.h.Keys(tb) {
		if !before[k.Key] {
			out = append(out, k)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

func (s *suite) expectNoNewKeys(tb testing.TB, before map[string]bool, when string) {
	tb.Helper()
	if s.h.Keys == nil {
		return
	}
	if ks := s.newKeys(tb, before); len(ks) > 0 {
		tb.Errorf("%s: the backend holds new keys %s, want none", when, fmtKeys(ks))
	}
}

func fmtKeys(ks []KeyTTL) string {
	s := "["
	for i, k := range ks {
		if i > 0 {
			s += " "
		}
		s += fmt.Sprintf("%.80q(ttl %v)", k.Key, k.TTL)
	}
	return s + "]"
}

// ttlStep is one Take and the longest TTL ALGORITHMS.md gives the keys it
// leaves (zero: the key must have left no keys at all).
type ttlStep struct {
	at      time.Duration
	n       int64
	allowed bool // checked when n > 0
	maxTTL  time.Duration
}

// ttlSteps is the call sequence every TTL case runs: a peek on a fresh key,
// an admission, a peek later, another admission, a denial of a cost too
// large (which sets the penalty lock), a call during the lock, and the state
// after everything has lapsed. a1 and a3 are the longest TTL after the two
// admissions.
func ttlSteps(a1, a3 time.Duration) []ttlStep {
	return []ttlStep{
		{0, 0, true, 0},                // a peek writes nothing
		{0, 1, true, a1},               // a write sets the TTL
		{20 * ms, 0, true, a1 - 20*ms}, // a peek does not refresh it
		{50 * ms, 1, true, a3},         // a write sets it by the formula
		{50 * ms, 5, false, 500 * ms},  // n > capacity: the lock, ttl L = 500ms
		{100 * ms, 1, false, 450 * ms}, // a locked call does not extend the lock
		{605 * ms, 0, true, 0},         // all lapsed: nothing left
	}
}

// ttlCase is a TTL case: the limits, the alignment of its first step, and
// the longest TTL after its two admissions (see ttlSteps).
type ttlCase struct {
	name          string
	limits        []store.Limit
	align, offset time.Duration
	a1, a3        time.Duration
}

// ttlCases returns every TTL case, all with a penalty of 500ms.
func ttlCases() []ttlCase {
	const L = 500 * ms
	return []ttlCase{
		// T = 100ms, dvt = 200ms: tat 100ms, then 200ms at 50ms.
		{"GCRA", []store.Limit{{Algorithm: store.GCRA, Rate: 10, Period: time.Second, Burst: 2, Penalty: L}}, 0, 0, 100 * ms, 150 * ms},
		{"LeakyBucket", []store.Limit{{Algorithm: store.LeakyBucket, Rate: 10, Period: time.Second, Burst: 1, Penalty: L}}, 0, 0, 100 * ms, 150 * ms},
		// ttl = ceil((cap - tok)/R): one token short, then 1.5.
		{"TokenBucket", []store.Limit{{Algorithm: store.TokenBucket, Rate: 10, Period: time.Second, Burst: 2, Penalty: L}}, 0, 0, 100 * ms, 150 * ms},
		// ttl = end - now, from e = 20ms and e = 70ms.
		{"FixedWindow", []store.Limit{{Algorithm: store.FixedWindow, Rate: 2, Period: 200 * ms, Penalty: L}}, 200 * ms, 20 * ms, 180 * ms, 130 * ms},
		// ttl = 2P - e.
		{"SlidingWindow", []store.Limit{{Algorithm: store.SlidingWindow, Rate: 2, Period: 200 * ms, Penalty: L}}, 200 * ms, 20 * ms, 380 * ms, 330 * ms},
		// ttl = t + P - now.
		{"SlidingLog", []store.Limit{{Algorithm: store.SlidingLog, Rate: 2, Period: 200 * ms, Penalty: L}}, 0, 0, 200 * ms, 200 * ms},
		{"AllAtOnce", []store.Limit{
			{Algorithm: store.GCRA, Rate: 10, Period: time.Second, Burst: 2, Penalty: L},
			{Algorithm: store.LeakyBucket, Rate: 10, Period: time.Second, Burst: 1, Penalty: L},
			{Algorithm: store.TokenBucket, Rate: 10, Period: time.Second, Burst: 2, Penalty: L},
			{Algorithm: store.FixedWindow, Rate: 2, Period: 200 * ms, Penalty: L},
			{Algorithm: store.SlidingWindow, Rate: 2, Period: 200 * ms, Penalty: L},
			{Algorithm: store.SlidingLog, Rate: 2, Period: 200 * ms, Penalty: L},
		}, 200 * ms, 20 * ms, 380 * ms, 330 * ms},
	}
}

// testTTL checks the TTL of every key after each kind of call, and that the
// backend is empty once they lapse.
func (s *suite) testTTL(t *testing.T) {
	if s.h.Keys == nil {
		t.Skip("Harness.Keys is nil")
	}
	// On a wall clock, the figures hold while the run is less than this late
	// (the FixedWindow case has the least room: 130ms to its window's end;
	// and it stays below every case's step, P/R = 100ms) and, for each step,
	// less late than the step's longest TTL (see ttlOnce); there every
	// duration is stretched by wallScale.
	const margin = ttlMargin
	for _, c := range ttlCases() {
		c := c
		t.Run(c.name, func(t *testing.T) {
			limits, align, offset, steps, margin := c.limits, c.align, c.offset, ttlSteps(c.a1, c.a3), margin
			if !s.exact {
				const k = wallScale
				limits, align, offset, margin = scaleLimits(limits, k), align*k, offset*k, margin*k
				for i := range steps {
					steps[i].at *= k
					steps[i].maxTTL *= k
				}
			}
			retry(t, func() ([]string, string) {
				return s.ttlOnce(t, limits, align, offset, steps, margin)
			})
		})
	}
}

// ttlMargin is how late a step of a TTL case may run (before wallScale).
const ttlMargin = 90 * ms

// ttlSlack is how much of a step's longest TTL the lateness allowance of
// a wall-clock run leaves: the keys are then still there to be judged.
const ttlSlack = 5 * ms

// ttlOnce runs steps on a fresh key and judges the keys each one leaves; on
// a wall clock it gives up, reporting why, once a step runs later than it
// can be judged.
func (s *suite) ttlOnce(t *testing.T, limits []store.Limit, align, offset time.Duration, steps []ttlStep, margin time.Duration) (fails []string, late string) {
	st := s.h.NewStore(t)
	key := newKey(t)
	warmUp(t, limits, st)
	before := s.keySet(t)
	ref := s.align(t, align, offset)
	var prevAt time.Duration
	var prevEnd time.Time
	var drift time.Duration
	for i, step := range steps {
		if i > 0 {
			s.waitStep(t, prevAt, step.at, prevEnd)
		}
		start := time.Now()
		res, err := take(t, st, key, step.n, limits...)
		call := time.Since(start)
		where := fmt.Sprintf("step %d (at %v, n=%d)", i, step.at, step.n)
		if err != nil {
			return append(fails, fmt.Sprintf("%s: %v", where, err)), ""
		}
		ks := s.newKeys(t, before)
		end := time.Now()
		// How long ago, at most, the instant this step stands for was.
		var lateness time.Duration
		if !s.exact {
			lateness = end.Sub(ref) - step.at
			drift = max(drift, lateness)
			// A step can be judged while its keys cannot have lapsed
			// because it ran late: the allowance is the margin, but never
			// more than the step's longest TTL (less Redis' rounding to
			// whole milliseconds and the time to list the keys). A step
			// that expects no keys is only helped by lateness.
			if allowance := min(margin, step.maxTTL-ttlSlack); drift >= allowance && step.maxTTL != 0 {
				return fails, lateBy(i, drift, allowance, call)
			}
		}
		fails = append(fails, s.judgeTTLStep(where, step, res, ks, lateness)...)
		prevAt, prevEnd = step.at, end
	}
	return fails, ""
}

// judgeTTLStep judges a step's Result and the keys ks it left: none when the
// step expects none; otherwise some, each with 0 < TTL ≤ the step's maxTTL,
// the longest no shorter than maxTTL (less the step's lateness and 2 ms on a
// wall clock).
func (s *suite) judgeTTLStep(where string, step ttlStep, res store.Result, ks []KeyTTL, lateness time.Duration) (fails []string) {
	if step.n > 0 && res.Allowed != step.allowed {
		fails = append(fails, fmt.Sprintf("%s: %s, want Allowed=%v", where, fmtResult(res), step.allowed))
	}
	if step.maxTTL == 0 {
		if len(ks) > 0 {
			fails = append(fails, fmt.Sprintf("%s: the backend holds %s, want no keys", where, fmtKeys(ks)))
		}
		return fails
	}
	if len(ks) == 0 {
		fails = append(fails, fmt.Sprintf("%s: no keys stored, want some with TTL %v", where, step.maxTTL))
	}
	var longest time.Duration
	for _, k := range ks {
		// Redis rounds a TTL up to whole milliseconds.
		if k.TTL <= 0 || k.TTL > step.maxTTL+ms {
			fails = append(fails, fmt.Sprintf("%s: key %.80q has TTL %v, want 0 < TTL ≤ %v", where, k.Key, k.TTL, step.maxTTL))
		}
		longest = max(longest, k.TTL)
	}
	low := step.maxTTL
	if !s.exact {
		low -= lateness + 2*ms
	}
	if len(ks) > 0 && longest < low {
		fails = append(fails, fmt.Sprintf("%s: longest TTL %v (keys %s), want %v", where, longest, fmtKeys(ks), step.maxTTL))
	}
	return fails
}

// testNoImmortalKeys: whatever the suite left behind expires.
func (s *suite) testNoImmortalKeys(t *testing.T) {
	if s.h.Keys == nil {
		t.Skip("Harness.Keys is nil")
	}
	for _, k := range s.h.Keys(t) {
		if k.TTL <= 0 {
			t.Errorf("key %.80q has no TTL (%v)", k.Key, k.TTL)
		}
	}
}
