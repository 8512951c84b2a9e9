package main

import "testing"

// BenchmarkMemory compares the in-memory contenders (sluice's memory store
// for each algorithm, x/time/rate in a sync.Map, sethvargo/go-limiter,
// ulule/limiter's memory store) on the allow path over 1000 keys, from one
// goroutine and from GOMAXPROCS goroutines.
//
//	go test -run '^$' -bench Memory -benchmem
func BenchmarkMemory(b *testing.B) {
	keys := makeKeys(1000)
	for _, im := range memoryContenders(selectImpls(contenders(), []string{"all"})) {
		for _, mode := range []string{"serial", "parallel"} {
			b.Run(im.name+"/"+mode, func(b *testing.B) {
				f, cleanup, err := newMemDecider(im)
				if err != nil {
					b.Fatal(err)
				}
				defer cleanup()
				if mode == "parallel" {
					benchParallel(b, f, keys)
				} else {
					benchSerial(b, f, keys)
				}
			})
		}
	}
}
