package main

import (
	"context"
	"net/http"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"
)

// The interleaved comparisons time A and B in alternating batches short
// enough (about 0.1 ms) that most run without being descheduled, many times
// in one process, and report low percentiles of each side's batch times:
// on a loaded machine, where consecutive benchmark runs swing by 2x, their
// ratio is steadier than ns/op of separate runs. They run only when
// SLUICE_INTERLEAVE is set (its value: the rounds, 3000 by default).
//
//	cd bench && SLUICE_INTERLEAVE=3000 go test -run Interleaved -v
func interleaveRounds(t *testing.T) int {
	v, ok := os.LookupEnv("SLUICE_INTERLEAVE")
	if !ok {
		t.Skip("set SLUICE_INTERLEAVE to run the interleaved comparisons")
	}
	if n, err := strconv.Atoi(v); err == nil && n > 0 {
		return n
	}
	return 3000
}

// interleave times a and b, batch calls each, alternating which goes first,
// and logs the 10th and 25th percentiles of their ns per call.
func interleave(t *testing.T, name string, rounds, batch int, a, b func(i int)) {
	run := func(f func(int)) float64 {
		start := time.Now()
		for i := range batch {
			f(i)
		}
		return float64(time.Since(start).Nanoseconds()) / float64(batch)
	}
	run(a)
	run(b)
	var as, bs []float64
	for r := range rounds {
		if r%2 == 0 {
			as, bs = append(as, run(a)), append(bs, run(b))
		} else {
			bs, as = append(bs, run(b)), append(as, run(a))
		}
	}
	slices.Sort(as)
	slices.Sort(bs)
	p := func(s []float64, q float64) float64 { return s[int(q*float64(len(s)-1))] }
	for _, q := range []float64{.1, .25} {
		pa, pb := p(as, q), p(bs, q)
		t.Logf("%s, p%.0f of %d rounds: A %.1f ns, B %.1f ns: B/A %.3f, B-A %.1f ns", name, q*100, rounds, pa, pb, pb/pa, pb-pa)
	}
}

// A: x/time/rate, B: the memory store's GCRA, serial, on 1000 keys, as
// BenchmarkMemory's serial cases.
func TestInterleavedMemory(t *testing.T) {
	rounds := interleaveRounds(t)
	keys := makeKeys(1000)
	f := map[string]decideFunc{}
	for _, im := range memoryContenders(selectImpls(contenders(), []string{"all"})) {
		if im.name == "x/time/rate" || im.name == "sluice-mem/gcra" {
			d, cleanup, err := newMemDecider(im)
			if err != nil {
				t.Fatal(err)
			}
			defer cleanup()
			f[im.name] = d
		}
	}
	ctx := context.Background()
	call := func(d decideFunc) func(int) {
		return func(i int) {
			if ok, err := d(ctx, keys[i%len(keys)]); !ok || err != nil {
				t.Fatalf("denied on the allow path (err %v)", err)
			}
		}
	}
	interleave(t, "memory, serial, 1000 keys: A x/time/rate, B sluice-mem/gcra", rounds, 500,
		call(f["x/time/rate"]), call(f["sluice-mem/gcra"]))
}

// A: the bare handler, B: the same behind the adapter, as BenchmarkAdapter.
func TestInterleavedAdapters(t *testing.T) {
	rounds := interleaveRounds(t)
	cases, err := adapterCases()
	if err != nil {
		t.Fatal(err)
	}
	reqs := keyRequests(makeKeys(1000))
	w := &resetWriter{h: make(http.Header, 8)}
	serve := func(h http.Handler) func(int) {
		return func(i int) {
			clear(w.h)
			w.code = 0
			h.ServeHTTP(w, reqs[i%len(reqs)])
			if w.code != http.StatusOK {
				t.Fatalf("status %d on the allow path", w.code)
			}
		}
	}
	for _, c := range cases {
		interleave(t, c.name+": A bare, B limited", rounds, 200, serve(c.bare), serve(c.limited))
	}
}
