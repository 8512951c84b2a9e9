package storetest

import (
	"fmt"
	"math/rand"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/store"
)

// seedCase is one algorithm of the seed scenario and, computed by hand, how
// many requests it admits in each second.
type seedCase struct {
	alg       store.Algorithm
	perSecond []int
}

// seedSpec is the seed scenario at one size: a limit of r per p against
// traffic[i] requests in second i+1, the first second starting at a
// multiple of p. burst is what the fixed window admits in seconds 3–5.
type seedSpec struct {
	p        time.Duration
	r, burst int64
	traffic  []int
	cases    []seedCase
}

// seedFull is the seed article's scenario, 1000 per 3 s, each second's
// requests spread evenly across it.
func seedFull() seedSpec {
	return seedSpec{
		p: 3 * time.Second, r: 1000, burst: 1980,
		traffic: []int{10, 10, 980, 900, 100, 0},
		cases: []seedCase{
			{store.FixedWindow, []int{10, 10, 980, 900, 100, 0}},
			// The log is full at 3 s; afterwards a request passes only when an
			// entry of the first (then the second) second has left it.
			{store.SlidingLog, []int{10, 10, 980, 10, 10, 0}},
			// In the second window p = 1000, so a request at e passes while
			// c+1 ≤ 1000·e/P: floor(999444µs / 3000µs) = 333 in second 4; in
			// second 5 the allowance outgrows the 100 requests.
			{store.SlidingWindow, []int{10, 10, 980, 333, 100, 0}},
		},
	}
}

// seedLight is seedFull at a tenth of its size (Harness.Light).
func seedLight() seedSpec {
	return seedSpec{
		p: 3 * time.Second, r: 100, burst: 198,
		traffic: []int{1, 1, 98, 90, 10, 0},
		cases: []seedCase{
			{store.FixedWindow, []int{1, 1, 98, 90, 10, 0}},
			// The entries at 0.5 s and 1.5 s leave at 3.5 s and 4.5 s.
			{store.SlidingLog, []int{1, 1, 98, 1, 1, 0}},
			// c+1 ≤ 100·e/P: floor(994444µs / 30000µs) = 33.
			{store.SlidingWindow, []int{1, 1, 98, 33, 10, 0}},
		},
	}
}

// seedWallClock is seedLight as testSeedWallClock plays it: the fixed window
// and the sliding log only.
func seedWallClock() seedSpec {
	spec := seedLight()
	spec.cases = slices.DeleteFunc(spec.cases, func(c seedCase) bool { return c.alg == store.SlidingWindow })
	return spec
}

// testSeed replays the seed article's traffic against a limit of 1000 per
// 3 s: 10, 10, 980, 900, 100 and 0 requests in six consecutive seconds, each
// second's requests spread evenly across it, starting at a multiple of 3 s.
// The fixed window lets 1980 through in seconds 3–5, as the article warns;
// the sliding log never more than 1000 in any 3 s span; the sliding window
// stays within its bound (see the package documentation).
func (s *suite) testSeed(t *testing.T) {
	if !s.exact {
		s.testSeedWallClock(t)
		return
	}
	spec := seedFull()
	if s.h.Light {
		spec = seedLight()
	}
	admitted := s.playSeed(t, spec)
	for i := range spec.cases {
		for _, f := range spec.check(i, admitted[i], nil) {
			t.Error(f)
		}
	}
}

// playSeed plays spec on the controlled clock, each case on its own key,
// alternating between two store instances, and returns the times (µs since
// the start) at which each case admitted a request.
func (s *suite) playSeed(t *testing.T, spec seedSpec) [][]int64 {
	stores := s.stores(t)
	keys := make([]string, len(spec.cases))
	admitted := make([][]int64, len(spec.cases)) // µs since the start
	for i := range spec.cases {
		keys[i] = newKey(t)
	}
	s.align(t, spec.p, 0)
	var now int64
	calls := 0
	for sec, k := range spec.traffic {
		for j := 0; j < k; j++ {
			at := int64(sec)*1e6 + int64(2*j+1)*1e6/int64(2*k)
			s.advance(t, time.Duration(at-now)*us)
			now = at
			for i, c := range spec.cases {
				lim := store.Limit{Algorithm: c.alg, Rate: spec.r, Period: spec.p}
				if mustTake(t, stores[calls%2], keys[i], 1, lim).Allowed {
					admitted[i] = append(admitted[i], at)
				}
			}
			calls++
		}
	}
	return admitted
}

// check judges what case i admitted (µs since the start, which was a
// multiple of p, so offsets are window positions): the count in each second,
// and the algorithm's guarantee. On a wall clock, spans holds when each
// admitted request's Take ran (the store's clock read a moment within it),
// and the sliding log's guarantee is judged on them; admitted then holds
// the times the requests were scheduled at, which the counts per second
// and per window use.
func (spec seedSpec) check(i int, admitted []int64, spans []span) (fails []string) {
	c := spec.cases[i]
	got := make([]int, len(spec.traffic))
	units := make([]unit, len(admitted))
	for j, at := range admitted {
		got[at/1e6]++
		units[j] = unit{at: at, n: 1}
	}
	if !slices.Equal(got, c.perSecond) {
		fails = append(fails, fmt.Sprintf("%s: admitted per second %v, want %v", c.alg, got, c.perSecond))
	}
	switch c.alg {
	case store.FixedWindow:
		if n := countIn(units, 2e6, 5e6); n != spec.burst {
			fails = append(fails, fmt.Sprintf("fixed window: %d admitted in seconds 3-5, want the seed's %d", n, spec.burst))
		}
	case store.SlidingLog:
		err := checkTrailing(units, spec.p.Microseconds(), spec.r)
		if spans != nil {
			err = checkTrailingSpans(spans, spec.p.Microseconds(), spec.r)
		}
		if err != nil {
			fails = append(fails, fmt.Sprintf("sliding log: %v", err))
		}
	case store.SlidingWindow:
		if err := checkSlidingWindow(units, spec.p.Microseconds(), spec.r); err != nil {
			fails = append(fails, fmt.Sprintf("sliding window: %v", err))
		}
	}
	return fails
}

// testSeedWallClock is the seed scenario on a store that runs on this
// machine's wall clock (a local redis-server), at a tenth of its size: 100
// per 3 s against 1, 1, 98, 90, 10 and 0 requests per second, the first
// second starting at a multiple of 3 s since the Unix epoch, so that the
// fixed windows are the seconds 1–3 and 4–6. Each second's requests are
// spread over its middle 80%, so that a request must run more than 100 ms
// late to change window or second; an attempt that runs later than the
// margin is retried on new keys. The fixed window admits all 200, 198 of
// them in seconds 3–5; the sliding log admits 1, 1, 98, 1, 1, 0 and never
// more than 100 in any 3 s span (judged on when each Take ran, not on its
// schedule: the store stamps a late request late).
func (s *suite) testSeedWallClock(t *testing.T) {
	spec := seedWallClock()
	retry(t, func() ([]string, string) {
		admitted, spans, late := s.playSeedWallClock(t, spec)
		if late != "" {
			return nil, late
		}
		var fails []string
		for i := range spec.cases {
			fails = append(fails, spec.check(i, admitted[i], spans[i])...)
		}
		return fails, ""
	})
}

// seedMargin is how late a request of testSeedWallClock may end before the
// attempt proves nothing: less than the room the last request of a second
// leaves before the second ends (104 ms; the first request of a second
// comes 100 ms or more into it), so a request that late still counts in
// its second and its window.
const seedMargin = 90 * time.Millisecond

// seedAt is when testSeedWallClock sends request j of the k of second sec
// (from 0), since the start: spread over the second's middle 80%.
func seedAt(sec, j, k int) time.Duration {
	return time.Duration(sec)*time.Second + 100*time.Millisecond +
		time.Duration(int64(2*j+1)*int64(800*time.Millisecond)/int64(2*k))
}

// playSeedWallClock plays spec on the wall clock as testSeedWallClock
// describes and returns the times (µs since the start, as scheduled) at
// which each case admitted a request and when (µs since the start) the
// Takes that admitted them ran, or why the attempt ran too late.
func (s *suite) playSeedWallClock(t *testing.T, spec seedSpec) (admitted [][]int64, spans [][]span, late string) {
	stores := s.stores(t)
	keys := make([]string, len(spec.cases))
	limits := make([]store.Limit, len(spec.cases))
	for i, c := range spec.cases {
		keys[i] = newKey(t)
		limits[i] = store.Limit{Algorithm: c.alg, Rate: spec.r, Period: spec.p}
		warmUp(t, limits[i:i+1], stores[:]...)
	}
	admitted = make([][]int64, len(spec.cases))
	spans = make([][]span, len(spec.cases))
	ref := s.align(t, spec.p, 0)
	calls := 0
	for sec, k := range spec.traffic {
		for j := 0; j < k; j++ {
			at := seedAt(sec, j, k)
			time.Sleep(time.Until(ref.Add(at)))
			for i := range spec.cases {
				start := time.Now()
				res := mustTake(t, stores[calls%2], keys[i], 1, limits[i])
				end := time.Now()
				if lag := end.Sub(ref.Add(at)); lag > seedMargin {
					return nil, nil, fmt.Sprintf("request %d of second %d ended %v after its schedule (margin %v; its Take took %v)",
						j, sec+1, lag.Round(us), seedMargin, end.Sub(start).Round(us))
				}
				if res.Allowed {
					admitted[i] = append(admitted[i], at.Microseconds())
					spans[i] = append(spans[i], span{start.Sub(ref).Microseconds(), end.Sub(ref).Microseconds()})
				}
			}
			calls++
		}
	}
	return admitted, spans, ""
}

// span is when a wall-clock Take ran, µs since a reference: the store's
// clock read a moment within [from, to].
type span struct{ from, to int64 }

// checkTrailingSpans is checkTrailing for admissions known only to lie
// within spans (one Take after another, so the spans do not overlap): it
// reports a trailing span (t-p, t] that holds more than r of them wherever
// in its span each one lies. A request that ran late, as the margin
// allows, is stamped late by the store, and leaves its log late too; its
// scheduled time would misplace it.
func checkTrailingSpans(spans []span, p, r int64) error {
	for i, u := range spans {
		c := int64(1) // u itself
		for j, v := range spans {
			if j != i && v.from > u.to-p && v.to <= u.from {
				c++
			}
		}
		if c > r {
			return fmt.Errorf("%d admitted in (%dµs, %dµs] (within their Takes' spans), more than %d", c, u.to-p, u.from, r)
		}
	}
	return nil
}

// unit is one admitted request: its time (µs) and cost.
type unit struct {
	at    int64
	n     int64
	delay int64 // µs, LeakyBucket
}

// countIn sums the cost admitted in [from, to).
func countIn(us []unit, from, to int64) int64 {
	var c int64
	for _, u := range us {
		if u.at >= from && u.at < to {
			c += u.n
		}
	}
	return c
}

// checkTrailing: at most r units in any trailing span (t-p, t].
func checkTrailing(us []unit, p, r int64) error {
	for _, u := range us {
		if c := countIn(us, u.at-p+1, u.at+1); c > r {
			return fmt.Errorf("%d admitted in (%dµs, %dµs], more than %d", c, u.at-p, u.at, r)
		}
	}
	return nil
}

// checkSlidingWindow holds SlidingWindow to its bound: an admission at t, e
// into window w (times are µs since the epoch, or since any multiple of p),
// leaves at most r + floor(q·e/p) admitted in (t-p, t], q being the count
// admitted in window w-1.
func checkSlidingWindow(us []unit, p, r int64) error {
	for _, u := range us {
		w := u.at / p
		e := u.at - w*p
		q := countIn(us, (w-1)*p, w*p)
		bound := r + q*e/p
		if c := countIn(us, u.at-p+1, u.at+1); c > bound {
			return fmt.Errorf("%d admitted in (%dµs, %dµs], more than the bound %d + floor(%d·%d/%d) = %d", c, u.at-p, u.at, r, q, e, p, bound)
		}
	}
	return nil
}

// checkSpan: in any span [t_i, t_j] of admissions at most burst + floor((t_j-t_i)·rate/per)
// units pass (GCRA and LeakyBucket: rate/per = 1/T; TokenBucket: R/P).
func checkSpan(us []unit, burst, rate, per int64) error {
	for i := range us {
		var c int64
		for j := i; j < len(us); j++ {
			c += us[j].n
			if bound := burst + (us[j].at-us[i].at)*rate/per; c > bound {
				return fmt.Errorf("%d admitted in [%dµs, %dµs], more than %d", c, us[i].at, us[j].at, bound)
			}
		}
	}
	return nil
}

// testBounds drives each algorithm with pseudo-random bursty traffic of
// mixed costs (and peeks) and checks the guarantee it documents on every
// admission.
func (s *suite) testBounds(t *testing.T) {
	if !s.exact {
		t.Skip("needs a controlled clock (Harness.Now and Advance)")
	}
	const R, B = 5, 3
	const P = time.Second
	for i, lim := range []store.Limit{
		{Algorithm: store.GCRA, Rate: R, Period: P, Burst: B},
		{Algorithm: store.LeakyBucket, Rate: R, Period: P, Burst: B},
		{Algorithm: store.TokenBucket, Rate: R, Period: P, Burst: B},
		{Algorithm: store.FixedWindow, Rate: R, Period: P},
		{Algorithm: store.SlidingWindow, Rate: R, Period: P},
		{Algorithm: store.SlidingLog, Rate: R, Period: P},
	} {
		lim, seed := lim, int64(i+1)
		t.Run(string(lim.Algorithm), func(t *testing.T) {
			admitted, denied := s.randomTraffic(t, lim, seed)
			if len(admitted) < R || denied == 0 {
				t.Fatalf("seed %d: %d admitted, %d denied: the traffic did not exercise the limit", seed, len(admitted), denied)
			}
			if err := checkBound(lim, admitted); err != nil {
				t.Errorf("%v, traffic seed %d: %v", lim, seed, err)
			}
		})
	}
}

// randomTraffic takes 400 (Light: 200) pseudo-random costs of 0, 1 or 2 for
// one key under lim, at pseudo-random intervals, alternating between two
// store instances, and returns what was admitted and how many were denied.
func (s *suite) randomTraffic(t *testing.T, lim store.Limit, seed int64) (admitted []unit, denied int) {
	rng := rand.New(rand.NewSource(seed))
	stores := s.stores(t)
	key := newKey(t)
	requests := 400
	if s.h.Light {
		requests = 200
	}
	for k := 0; k < requests; k++ {
		if rng.Intn(2) == 0 {
			s.advance(t, time.Duration(1+rng.Int63n(400_000))*us)
		}
		n := int64(1)
		switch x := rng.Intn(10); {
		case x == 0:
			n = 0
		case x <= 3:
			n = 2
		}
		res := mustTake(t, stores[k%2], key, n, lim)
		switch {
		case res.Allowed && n > 0:
			admitted = append(admitted, unit{at: s.h.Now().UnixMicro(), n: n, delay: res.Delay.Microseconds()})
		case !res.Allowed:
			denied++
		}
	}
	return admitted, denied
}

// checkBound checks the guarantee lim's algorithm documents on admitted
// (see the package documentation), with T = ceil(P/R).
func checkBound(lim store.Limit, admitted []unit) error {
	p := lim.Period.Microseconds()
	R, B := lim.Rate, lim.Burst
	T := (p + R - 1) / R
	switch lim.Algorithm {
	case store.GCRA:
		return checkSpan(admitted, B, 1, T)
	case store.LeakyBucket:
		if err := checkSpan(admitted, B+1, 1, T); err != nil {
			return err
		}
		return checkDepartures(admitted, B, T)
	case store.TokenBucket:
		return checkSpan(admitted, B, R, p)
	case store.FixedWindow:
		return checkFixedWindow(admitted, p, R)
	case store.SlidingWindow:
		return checkSlidingWindow(admitted, p, R)
	case store.SlidingLog:
		return checkTrailing(admitted, p, R)
	}
	return nil
}

// checkFixedWindow: at most r units in each epoch-aligned window of p.
func checkFixedWindow(us []unit, p, r int64) error {
	for _, u := range us {
		w := u.at / p
		if c := countIn(us, w*p, (w+1)*p); c > r {
			return fmt.Errorf("%d admitted in window %d, more than %d", c, w, r)
		}
	}
	return nil
}

// checkDepartures: a LeakyBucket's admitted requests, each held for its
// Delay, leave at least n·T apart (n the cost of the later one), and no
// request waits longer than the queue, B·T.
func checkDepartures(us []unit, b, t int64) error {
	for i, u := range us {
		if u.delay < 0 || u.delay > b*t {
			return fmt.Errorf("delay %dµs at %dµs, want within [0, %dµs]", u.delay, u.at, b*t)
		}
		if i == 0 {
			continue
		}
		prev := us[i-1].at + us[i-1].delay
		if dep := u.at + u.delay; dep-prev < u.n*t {
			return fmt.Errorf("departures at %dµs and %dµs (cost %d): closer than %d·T = %dµs", prev, dep, u.n, u.n, u.n*t)
		}
	}
	return nil
}
