package storetest

import (
	"fmt"
	"math/rand"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
)

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
	const P = 3 * time.Second
	// Figures computed by hand: admitted in each second.
	type algCase struct {
		alg       core.Algorithm
		perSecond []int
	}
	R, burst := int64(1000), int64(1980)
	traffic := []int{10, 10, 980, 900, 100, 0}
	cases := []algCase{
		{core.FixedWindow, []int{10, 10, 980, 900, 100, 0}},
		// The log is full at 3 s; afterwards a request passes only when an
		// entry of the first (then the second) second has left it.
		{core.SlidingLog, []int{10, 10, 980, 10, 10, 0}},
		// In the second window p = 1000, so a request at e passes while
		// c+1 ≤ 1000·e/P: floor(999444µs / 3000µs) = 333 in second 4; in
		// second 5 the allowance outgrows the 100 requests.
		{core.SlidingWindow, []int{10, 10, 980, 333, 100, 0}},
	}
	if s.h.Light {
		R, burst = 100, 198
		traffic = []int{1, 1, 98, 90, 10, 0}
		cases = []algCase{
			{core.FixedWindow, []int{1, 1, 98, 90, 10, 0}},
			// The entries at 0.5 s and 1.5 s leave at 3.5 s and 4.5 s.
			{core.SlidingLog, []int{1, 1, 98, 1, 1, 0}},
			// c+1 ≤ 100·e/P: floor(994444µs / 30000µs) = 33.
			{core.SlidingWindow, []int{1, 1, 98, 33, 10, 0}},
		}
	}
	stores := s.stores(t)
	keys := make([]string, len(cases))
	admitted := make([][]int64, len(cases)) // µs since the start
	for i := range cases {
		keys[i] = newKey(t)
	}
	s.align(t, P, 0)
	var now int64
	calls := 0
	for sec, k := range traffic {
		for j := 0; j < k; j++ {
			at := int64(sec)*1e6 + int64(2*j+1)*1e6/int64(2*k)
			s.advance(t, time.Duration(at-now)*us)
			now = at
			for i, c := range cases {
				lim := core.Limit{Algorithm: c.alg, Rate: R, Period: P}
				if mustTake(t, stores[calls%2], keys[i], 1, lim).Allowed {
					admitted[i] = append(admitted[i], at)
				}
			}
			calls++
		}
	}
	for i, c := range cases {
		got := make([]int, len(traffic))
		for _, at := range admitted[i] {
			got[at/1e6]++
		}
		if !slices.Equal(got, c.perSecond) {
			t.Errorf("%s: admitted per second %v, want %v", c.alg, got, c.perSecond)
		}
		units := make([]unit, len(admitted[i]))
		for j, at := range admitted[i] {
			units[j] = unit{at: at, n: 1}
		}
		switch c.alg {
		case core.FixedWindow:
			if n := countIn(units, 2e6, 5e6); n != burst {
				t.Errorf("fixed window: %d admitted in seconds 3-5, want the seed's %d", n, burst)
			}
		case core.SlidingLog:
			if err := checkTrailing(units, P.Microseconds(), R); err != nil {
				t.Errorf("sliding log: %v", err)
			}
		case core.SlidingWindow:
			// The clock started at a multiple of P, so offsets are window positions.
			if err := checkSlidingWindow(units, P.Microseconds(), R); err != nil {
				t.Errorf("sliding window: %v", err)
			}
		}
	}
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
// more than 100 in any 3 s span.
func (s *suite) testSeedWallClock(t *testing.T) {
	const (
		P      = 3 * time.Second
		R      = 100
		margin = 60 * time.Millisecond
	)
	traffic := []int{1, 1, 98, 90, 10, 0}
	cases := []struct {
		alg       core.Algorithm
		perSecond []int
	}{
		{core.FixedWindow, []int{1, 1, 98, 90, 10, 0}},
		// The entries at 0.5 s and 1.5 s leave the log at 3.5 s and 4.5 s.
		{core.SlidingLog, []int{1, 1, 98, 1, 1, 0}},
	}
	retry(t, func() (fails []string, late string) {
		stores := s.stores(t)
		keys := make([]string, len(cases))
		limits := make([]core.Limit, len(cases))
		for i, c := range cases {
			keys[i] = newKey(t)
			limits[i] = core.Limit{Algorithm: c.alg, Rate: R, Period: P}
			warmUp(t, limits[i:i+1], stores[:]...)
		}
		admitted := make([][]int64, len(cases)) // µs since the start, as scheduled
		ref := s.align(t, P, 0)
		calls := 0
		for sec, k := range traffic {
			for j := 0; j < k; j++ {
				at := time.Duration(sec)*time.Second + 100*time.Millisecond +
					time.Duration(int64(2*j+1)*int64(800*time.Millisecond)/int64(2*k))
				time.Sleep(time.Until(ref.Add(at)))
				for i := range cases {
					start := time.Now()
					res := mustTake(t, stores[calls%2], keys[i], 1, limits[i])
					if lag := time.Since(ref.Add(at)); lag > margin {
						return nil, fmt.Sprintf("request %d of second %d ended %v after its schedule (margin %v; its Take took %v)",
							j, sec+1, lag.Round(us), margin, time.Since(start).Round(us))
					}
					if res.Allowed {
						admitted[i] = append(admitted[i], at.Microseconds())
					}
				}
				calls++
			}
		}
		for i, c := range cases {
			got := make([]int, len(traffic))
			units := make([]unit, len(admitted[i]))
			for j, at := range admitted[i] {
				got[at/1e6]++
				units[j] = unit{at: at, n: 1}
			}
			if !slices.Equal(got, c.perSecond) {
				fails = append(fails, fmt.Sprintf("%s: admitted per second %v, want %v", c.alg, got, c.perSecond))
			}
			switch c.alg {
			case core.FixedWindow:
				if n := countIn(units, 2e6, 5e6); n != 198 {
					fails = append(fails, fmt.Sprintf("fixed window: %d admitted in seconds 3-5, want 198 (the seed's boundary burst)", n))
				}
			case core.SlidingLog:
				if err := checkTrailing(units, P.Microseconds(), R); err != nil {
					fails = append(fails, fmt.Sprintf("sliding log: %v", err))
				}
			}
		}
		return fails, ""
	})
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
	p := P.Microseconds()
	T := (p + R - 1) / R
	for i, lim := range []core.Limit{
		{Algorithm: core.GCRA, Rate: R, Period: P, Burst: B},
		{Algorithm: core.LeakyBucket, Rate: R, Period: P, Burst: B},
		{Algorithm: core.TokenBucket, Rate: R, Period: P, Burst: B},
		{Algorithm: core.FixedWindow, Rate: R, Period: P},
		{Algorithm: core.SlidingWindow, Rate: R, Period: P},
		{Algorithm: core.SlidingLog, Rate: R, Period: P},
	} {
		lim, seed := lim, int64(i+1)
		t.Run(string(lim.Algorithm), func(t *testing.T) {
			rng := rand.New(rand.NewSource(seed))
			stores := s.stores(t)
			key := newKey(t)
			var admitted []unit
			var denied int
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
			if len(admitted) < R || denied == 0 {
				t.Fatalf("seed %d: %d admitted, %d denied: the traffic did not exercise the limit", seed, len(admitted), denied)
			}
			var err error
			switch lim.Algorithm {
			case core.GCRA:
				err = checkSpan(admitted, B, 1, T)
			case core.LeakyBucket:
				err = checkSpan(admitted, B+1, 1, T)
				if err == nil {
					err = checkDepartures(admitted, B, T)
				}
			case core.TokenBucket:
				err = checkSpan(admitted, B, R, p)
			case core.FixedWindow:
				for _, u := range admitted {
					w := u.at / p
					if c := countIn(admitted, w*p, (w+1)*p); c > R {
						err = fmt.Errorf("%d admitted in window %d, more than %d", c, w, R)
						break
					}
				}
			case core.SlidingWindow:
				err = checkSlidingWindow(admitted, p, R)
			case core.SlidingLog:
				err = checkTrailing(admitted, p, R)
			}
			if err != nil {
				t.Errorf("%v, traffic seed %d: %v", lim, seed, err)
			}
		})
	}
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
