package main

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/store"
)

// The scenario of the seed articles: 1000 requests per 3 seconds.
const (
	limitRate   = 1000
	limitPeriod = 3 * time.Second

	// slice is the width of one bar of the charts.
	slice = 100 * time.Millisecond

	// tail is how long the replay goes on after the last offered second,
	// so that LeakyBucket's queue (at most Burst·Interval = one Period
	// long) is seen draining.
	tail = limitPeriod
)

// start is the instant the replay begins: a multiple of the Period since
// the Unix epoch, so that FixedWindow's epoch-aligned windows start with the
// pattern (seconds 1–3 and 4–6 of the seed traffic are one window each).
var start = time.Unix(1_800_000_000, 0)

// pattern is a traffic pattern: how many requests are offered in each
// second, spread evenly within the second.
type pattern struct {
	name      string // the -pattern value
	title     string
	perSecond []int
}

var patterns = []pattern{
	{
		name:      "seed",
		title:     "seed traffic: 10, 10, 980, 900, 100, 0 requests in seconds 1–6",
		perSecond: []int{10, 10, 980, 900, 100, 0},
	},
	{
		name:      "flood",
		title:     "steady flood: 667 requests per second (2× the rate) for 10 s",
		perSecond: []int{667, 667, 667, 667, 667, 667, 667, 667, 667, 667},
	},
}

// limitFor returns the limit every algorithm is replayed with: 1000 per 3 s,
// Burst at its default (Rate) where the algorithm has one.
func limitFor(alg store.Algorithm) store.Limit {
	return store.Limit{Algorithm: alg, Rate: limitRate, Period: limitPeriod}
}

// algNames are the Go names of the algorithms' constants, used in titles.
var algNames = map[store.Algorithm]string{store.GCRA: "GCRA", store.TokenBucket: "TokenBucket", store.FixedWindow: "FixedWindow", store.SlidingWindow: "SlidingWindow", store.SlidingLog: "SlidingLog", store.LeakyBucket: "LeakyBucket"}

// algName is the Go name of an algorithm's constant (see algNames), or
// its string for one without.
func algName(alg store.Algorithm) string {
	if name, ok := algNames[alg]; ok {
		return name
	}
	return string(alg)
}

// arrivals returns the offsets from start at which p's requests arrive, in
// ascending order: the c requests of second s at s + j·(1 s / c), j < c,
// in whole microseconds (the stores' resolution).
func arrivals(p pattern) []time.Duration {
	var ts []time.Duration
	for s, c := range p.perSecond {
		for j := 0; j < c; j++ {
			us := int64(j) * int64(time.Second/time.Microsecond) / int64(c)
			ts = append(ts, time.Duration(s)*time.Second+time.Duration(us)*time.Microsecond)
		}
	}
	return ts
}

// request is one replayed request and what the store decided.
type request struct {
	at      time.Duration // arrival, from start
	allowed bool
	delay   time.Duration // LeakyBucket: how long it is held before it is served
}

// served is when an admitted request is served: at arrival, or after its
// delay for LeakyBucket.
func (r request) served() time.Duration { return r.at + r.delay }

// replay is one algorithm's run over one pattern.
type replay struct {
	alg      store.Algorithm
	requests []request
}

// simulate replays p through alg on a memory store with a fake clock that is
// set to each request's arrival before its Take.
func simulate(p pattern, alg store.Algorithm) (replay, error) {
	now := start
	mem := memorystore.New(memorystore.WithClock(func() time.Time { return now }))
	limit, err := limitFor(alg).Spec()
	if err != nil {
		return replay{}, err
	}
	ctx := context.Background()
	rp := replay{alg: alg}
	for _, at := range arrivals(p) {
		now = start.Add(at)
		res, err := mem.Take(ctx, "client", 1, limit)
		if err != nil {
			return replay{}, fmt.Errorf("%s at %v: %w", algName(alg), at, err)
		}
		rp.requests = append(rp.requests, request{at: at, allowed: res.Allowed, delay: res.Delay})
	}
	return rp, nil
}

// admittedTimes returns when the admitted requests are served, ascending.
func (rp replay) admittedTimes() []time.Duration {
	var ts []time.Duration
	for _, r := range rp.requests {
		if r.allowed {
			ts = append(ts, r.served())
		}
	}
	// Arrivals ascend and LeakyBucket serves in arrival order (each request
	// leaves one Interval after the previous one at the earliest), so ts
	// ascends; keep it so for any future algorithm.
	for i := 1; i < len(ts); i++ {
		for j := i; j > 0 && ts[j] < ts[j-1]; j-- {
			ts[j], ts[j-1] = ts[j-1], ts[j]
		}
	}
	return ts
}

// admitted returns how many requests were admitted.
func (rp replay) admitted() int {
	n := 0
	for _, r := range rp.requests {
		if r.allowed {
			n++
		}
	}
	return n
}

// maxInSpan returns the most admitted requests served within any span of
// length d, that is in any half-open interval (t-d, t].
func maxInSpan(ts []time.Duration, d time.Duration) int {
	best, lo := 0, 0
	for hi, t := range ts {
		for ts[lo] <= t-d {
			lo++
		}
		if n := hi - lo + 1; n > best {
			best = n
		}
	}
	return best
}

// countIn returns how many of the ascending ts fall in [from, to).
func countIn(ts []time.Duration, from, to time.Duration) int {
	n := 0
	for _, t := range ts {
		if t >= from && t < to {
			n++
		}
	}
	return n
}

// scene is everything drawn for one pattern.
type scene struct {
	pattern  pattern
	slices   int   // number of slices on the time axis
	offered  []int // requests offered per slice
	replays  []replay
	admitted [][]int // per replay, requests served per slice
}

// build replays p through every algorithm and bins the results.
func build(p pattern) (scene, error) {
	sc := scene{pattern: p}
	end := time.Duration(len(p.perSecond))*time.Second + tail
	for _, alg := range store.Algorithms() {
		rp, err := simulate(p, alg)
		if err != nil {
			return scene{}, err
		}
		for _, r := range rp.requests {
			if r.allowed && r.served() >= end {
				end = r.served() + 1
			}
		}
		sc.replays = append(sc.replays, rp)
	}
	// Whole seconds on the time axis.
	end = (end + time.Second - 1) / time.Second * time.Second
	sc.slices = int(end / slice)
	sc.offered = make([]int, sc.slices)
	for _, at := range arrivals(p) {
		sc.offered[at/slice]++
	}
	for _, rp := range sc.replays {
		bins := make([]int, sc.slices)
		for _, t := range rp.admittedTimes() {
			bins[t/slice]++
		}
		sc.admitted = append(sc.admitted, bins)
	}
	return sc, nil
}

// total returns the number of requests offered.
func (sc scene) total() int {
	n := 0
	for _, c := range sc.offered {
		n += c
	}
	return n
}

// peak returns the largest per-slice figure of the scene.
func (sc scene) peak() int {
	m := 0
	for _, c := range sc.offered {
		m = max(m, c)
	}
	for _, bins := range sc.admitted {
		for _, c := range bins {
			m = max(m, c)
		}
	}
	return m
}

// perSecond sums per-slice figures by second.
func perSecond(bins []int) []int {
	per := int(time.Second / slice)
	out := make([]int, (len(bins)+per-1)/per)
	for i, c := range bins {
		out[i/per] += c
	}
	return out
}
