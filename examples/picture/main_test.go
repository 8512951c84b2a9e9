package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/store"
)

const committedSVG = "../../docs/algorithms.svg"

// scenes caches the replays of every pattern for the tests.
func allScenes(t *testing.T) []scene {
	t.Helper()
	scenes, err := scenesFor("both")
	if err != nil {
		t.Fatal(err)
	}
	if len(scenes) != len(patterns) {
		t.Fatalf("got %d scenes, want %d", len(scenes), len(patterns))
	}
	return scenes
}

func sceneNamed(t *testing.T, scenes []scene, name string) scene {
	t.Helper()
	for _, sc := range scenes {
		if sc.pattern.name == name {
			return sc
		}
	}
	t.Fatalf("no scene %q", name)
	return scene{}
}

func replayOf(t *testing.T, sc scene, alg store.Algorithm) replay {
	t.Helper()
	for _, rp := range sc.replays {
		if rp.alg == alg {
			return rp
		}
	}
	t.Fatalf("%s: no replay of %s", sc.pattern.name, alg)
	return replay{}
}

// The committed picture is what the command draws now, byte for byte.
func TestCommittedSVGIsCurrent(t *testing.T) {
	want, err := os.ReadFile(committedSVG)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "a.svg")
	var stdout, stderr bytes.Buffer
	if err := run([]string{"-pattern", "both", "-svg", out}, &stdout, &stderr); err != nil {
		t.Fatalf("run: %v (stderr %q)", err, stderr.String())
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("docs/algorithms.svg is stale: regenerate it with\n\tgo run ./examples/picture -pattern both -svg docs/algorithms.svg")
	}
	if stdout.Len() != 0 {
		t.Errorf("-svg also wrote to stdout: %q", stdout.String())
	}
	// Every algorithm has its panel in each column.
	for _, p := range patterns {
		for _, alg := range store.Algorithms() {
			if id := `id="` + p.name + "-" + string(alg) + `"`; !bytes.Contains(got, []byte(id)) {
				t.Errorf("no panel %s", id)
			}
		}
	}
}

// The seed articles' claim: a fixed window of 1000 per 3 s lets 1980
// requests through in seconds 3–5 of the seed traffic, because they
// straddle a window boundary.
func TestSeedFixedWindowBoundaryBurst(t *testing.T) {
	sc := sceneNamed(t, allScenes(t), "seed")
	fw := replayOf(t, sc, store.FixedWindow)
	ts := fw.admittedTimes()
	if got := countIn(ts, 2*time.Second, 5*time.Second); got != 1980 {
		t.Errorf("FixedWindow admitted %d in seconds 3–5, want 1980", got)
	}
	if got := maxInSpan(ts, limitPeriod); got != 1980 {
		t.Errorf("FixedWindow admitted at most %d in any 3 s, want 1980", got)
	}
	if got := fw.admitted(); got != sc.total() {
		t.Errorf("FixedWindow admitted %d of %d; each window's 1000 fits", got, sc.total())
	}
}

// checkWindows checks that no epoch-aligned window of Period holds more
// than Rate admitted requests (FixedWindow, and the current-window count of
// SlidingWindow), and, when exact, that a request is denied only when its
// window is full.
func checkWindows(t *testing.T, name string, rp replay, exact bool) {
	t.Helper()
	p := limitPeriod.Microseconds()
	counts := map[int64]int{}
	for _, r := range rp.requests {
		w := (start.UnixMicro() + r.at.Microseconds()) / p
		switch {
		case r.allowed:
			counts[w]++
			if counts[w] > limitRate {
				t.Fatalf("%s %s: window %d holds %d > %d", name, rp.alg, w, counts[w], limitRate)
			}
		case exact && counts[w] != limitRate:
			t.Fatalf("%s %s: denied at %v with %d in its window", name, rp.alg, r.at, counts[w])
		}
	}
}

// Every replay obeys the bounds ALGORITHMS.md implies.
func TestReplaysKeepTheirAlgorithmsBounds(t *testing.T) {
	spec, err := limitFor(store.GCRA).Spec()
	if err != nil {
		t.Fatal(err)
	}
	T := time.Duration(spec.Interval()) * time.Microsecond // 3 ms
	B := int(spec.Burst())                                 // 1000
	for _, sc := range allScenes(t) {
		name := sc.pattern.name
		offered := 0
		for _, c := range sc.pattern.perSecond {
			offered += c
		}
		if sc.total() != offered {
			t.Errorf("%s: %d offered in the slices, %d in the pattern", name, sc.total(), offered)
		}
		for i, rp := range sc.replays {
			if len(rp.requests) != offered {
				t.Errorf("%s %s: %d requests replayed, want %d", name, rp.alg, len(rp.requests), offered)
			}
			sum := 0
			for _, c := range sc.admitted[i] {
				sum += c
			}
			if sum != rp.admitted() {
				t.Errorf("%s %s: %d admitted in the slices, %d replayed", name, rp.alg, sum, rp.admitted())
			}
		}

		checkWindows(t, name, replayOf(t, sc, store.FixedWindow), true)
		checkWindows(t, name, replayOf(t, sc, store.SlidingWindow), false)

		// SlidingLog: never more than Rate in any trailing Period, and a
		// denial only when the trailing Period holds Rate.
		sl := replayOf(t, sc, store.SlidingLog)
		if got := maxInSpan(sl.admittedTimes(), limitPeriod); got != limitRate {
			t.Errorf("%s SlidingLog: at most %d in any 3 s, want exactly %d", name, got, limitRate)
		}
		var log []time.Duration
		for _, r := range sl.requests {
			if r.allowed {
				log = append(log, r.at)
				continue
			}
			if n := countIn(log, r.at-limitPeriod+1, r.at+1); n != limitRate {
				t.Fatalf("%s SlidingLog: denied at %v with %d in the trailing 3 s", name, r.at, n)
			}
		}

		// GCRA: at most B + d/T admitted in any span d (the TAT moves T per
		// request and stays within B·T of now); checked over every pair
		// i ≤ j as (j+1)·T - t_j - (i·T - t_i) ≤ B·T with a running minimum.
		// TokenBucket with the same rate and burst admits the same unit-cost
		// requests.
		g := replayOf(t, sc, store.GCRA)
		ts := g.admittedTimes()
		minI := time.Duration(1 << 62)
		for j, tj := range ts {
			minI = min(minI, time.Duration(j)*T-ts[j])
			if lhs := time.Duration(j+1)*T - tj - minI; lhs > time.Duration(B)*T {
				t.Fatalf("%s GCRA: more than B + d/T admitted in a span ending at %v", name, tj)
			}
		}
		tb := replayOf(t, sc, store.TokenBucket)
		for k := range g.requests {
			if g.requests[k].allowed != tb.requests[k].allowed {
				t.Fatalf("%s: at %v GCRA allowed=%v, TokenBucket allowed=%v", name, g.requests[k].at, g.requests[k].allowed, tb.requests[k].allowed)
			}
		}

		// LeakyBucket admits like GCRA with Burst B+1, and serves the
		// admitted one Interval apart at least, none held longer than B·T.
		lb := replayOf(t, sc, store.LeakyBucket)
		ref := gcraWithBurst(t, sc.pattern, int64(B+1))
		var last time.Duration = -1
		for k, r := range lb.requests {
			if r.allowed != ref[k] {
				t.Fatalf("%s: at %v LeakyBucket allowed=%v, GCRA with burst %d allowed=%v", name, r.at, r.allowed, B+1, ref[k])
			}
			if !r.allowed {
				continue
			}
			if r.delay < 0 || r.delay > time.Duration(B)*T {
				t.Fatalf("%s LeakyBucket: delay %v at %v", name, r.delay, r.at)
			}
			if last >= 0 && r.served()-last < T {
				t.Fatalf("%s LeakyBucket: served at %v, %v after the previous one", name, r.served(), r.served()-last)
			}
			last = r.served()
		}
		if got := maxInSpan(lb.admittedTimes(), limitPeriod); got > limitRate {
			t.Errorf("%s LeakyBucket: %d served in 3 s, more than the rate", name, got)
		}
	}
}

// gcraWithBurst replays p through a GCRA limit of the picture's rate with
// the given burst and reports which requests it admits.
func gcraWithBurst(t *testing.T, p pattern, burst int64) []bool {
	t.Helper()
	now := start
	st := memorystore.New(memorystore.WithClock(func() time.Time { return now }))
	limit := limitFor(store.GCRA)
	limit.Burst = burst
	var out []bool
	for _, at := range arrivals(p) {
		now = start.Add(at)
		res, err := st.Take(context.Background(), "k", 1, specs(limit)...)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, res.Allowed)
	}
	return out
}

func TestTerminalChart(t *testing.T) {
	var a, b, stderr bytes.Buffer
	if err := run(nil, &a, &stderr); err != nil {
		t.Fatal(err)
	}
	if err := run([]string{"-pattern", "seed"}, &b, &stderr); err != nil {
		t.Fatal(err)
	}
	if a.String() != b.String() {
		t.Error("the default is not -pattern seed, or the output is not reproducible")
	}
	out := a.String()
	for _, alg := range store.Algorithms() {
		if !strings.Contains(out, "\n"+algName(alg)+": ") {
			t.Errorf("no chart for %s", alg)
		}
	}
	// The table's FixedWindow row shows every request of the seed traffic
	// admitted: each window's share fits its 1000.
	row := fmt.Sprintf("\n%-14s", "FixedWindow")
	for _, c := range patterns[0].perSecond {
		row += fmt.Sprintf("%5d", c)
	}
	if !strings.Contains(out, row) {
		t.Errorf("FixedWindow row missing or wrong:\n%s", out)
	}
	var both bytes.Buffer
	if err := run([]string{"-pattern", "both"}, &both, &stderr); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(both.String(), out) || !strings.Contains(both.String(), patterns[1].title) {
		t.Error("-pattern both does not print the seed chart then the flood")
	}
}

func TestBadArguments(t *testing.T) {
	for _, args := range [][]string{
		{"-pattern", "burst"},
		{"-nope"},
		{"extra"},
		{"-svg", filepath.Join(t.TempDir(), "missing-dir", "a.svg")},
	} {
		var stdout, stderr bytes.Buffer
		if err := run(args, &stdout, &stderr); err == nil {
			t.Errorf("run(%q) succeeded", args)
		}
	}
}
