package main

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
)

// memResult is one in-memory contender's testing.Benchmark figures.
type memResult struct {
	name                         string
	sluice                       bool
	serialNs, parallelNs         float64
	serialAllocs, parallelAllocs int64
}

// benchSerial makes b.N decisions from one goroutine, cycling over keys.
func benchSerial(b *testing.B, f decideFunc, keys []string) {
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	idx := 0
	for range b.N {
		if ok, err := f(ctx, keys[idx]); err != nil || !ok {
			b.Fatalf("denied on the allow path (err %v): the figures would not be the allow path's", err)
		}
		if idx++; idx == len(keys) {
			idx = 0
		}
	}
}

// benchParallel makes b.N decisions from GOMAXPROCS goroutines, each cycling
// over keys from its own starting point.
func benchParallel(b *testing.B, f decideFunc, keys []string) {
	ctx := context.Background()
	var next atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		idx := int(next.Add(97)) % len(keys)
		for pb.Next() {
			if ok, err := f(ctx, keys[idx]); err != nil || !ok {
				b.Errorf("denied on the allow path (err %v): the figures would not be the allow path's", err)
				return
			}
			if idx++; idx == len(keys) {
				idx = 0
			}
		}
	})
}

// memoryContenders returns the in-memory contenders among selected.
func memoryContenders(selected []*impl) []*impl {
	var out []*impl
	for _, im := range selected {
		if im.group == "memory" {
			out = append(out, im)
		}
	}
	return out
}

// newMemDecider builds an in-memory contender on the allow quota.
func newMemDecider(im *impl) (decideFunc, func(), error) {
	newWorker, cleanup, err := im.build(nil, allowQuota)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", im.name, err)
	}
	return newWorker(), cleanup, nil
}

// runMemBench measures every selected in-memory contender with
// testing.Benchmark, serial and parallel, on the allow path, and prints them.
func runMemBench(selected []*impl) []memResult {
	keys := makeKeys(1000)
	var out []memResult
	fmt.Println("\n== in-memory, testing.Benchmark (allow path, 1000 keys): ns/op and allocs/op ==")
	fmt.Printf("%-26s %12s %10s %12s %10s\n", "contender", "serial ns", "allocs", "parallel ns", "allocs")
	for _, im := range memoryContenders(selected) {
		r := memResult{name: im.name, sluice: im.sluice}
		ok := true
		for _, parallel := range []bool{false, true} {
			f, cleanup, err := newMemDecider(im)
			if err != nil {
				fmt.Printf("%-26s ERROR %v\n", im.name, err)
				ok = false
				break
			}
			br := testing.Benchmark(func(b *testing.B) {
				if parallel {
					benchParallel(b, f, keys)
				} else {
					benchSerial(b, f, keys)
				}
			})
			cleanup()
			if br.N == 0 {
				fmt.Printf("%-26s ERROR benchmark failed\n", im.name)
				ok = false
				break
			}
			ns := float64(br.T.Nanoseconds()) / float64(br.N)
			if parallel {
				r.parallelNs, r.parallelAllocs = ns, br.AllocsPerOp()
			} else {
				r.serialNs, r.serialAllocs = ns, br.AllocsPerOp()
			}
		}
		if !ok {
			continue
		}
		fmt.Printf("%-26s %12.1f %10d %12.1f %10d\n", r.name, r.serialNs, r.serialAllocs, r.parallelNs, r.parallelAllocs)
		out = append(out, r)
	}
	return out
}
