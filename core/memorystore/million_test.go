package memorystore_test

import (
	"context"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/internal/redistest"
)

// heapInUse returns the live heap after a full collection.
func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestMemoryStoreMillionKeys sends one request for each of a million
// distinct keys (100,000 with -short), as a flood of spoofed identities
// would, through a memorystore.Store bounded by WithMaxKeys: the store never holds
// more states than its bound, and the heap it keeps does not grow with the
// flood once the bound is reached.
func TestMemoryStoreMillionKeys(t *testing.T) {
	redistest.Slow(t)
	total := 1_000_000
	if testing.Short() {
		total = 100_000
	}
	const maxKeys = 10_000
	ctx := context.Background()
	lims := []store.Limit{{Algorithm: store.SlidingLog, Rate: 10, Period: time.Hour}}

	base := heapInUse()
	kv := memorystore.New(memorystore.WithMaxKeys(maxKeys))
	take := func(from, to int) {
		var wg sync.WaitGroup
		const workers = 2
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := from + w; i < to; i += workers {
					// Long keys too: they are stored as digests.
					key := "flood-" + strconv.Itoa(i)
					if i%100 == 0 {
						key += strings.Repeat("x", 1000)
					}
					res, err := kv.Take(ctx, key, 1, specs(lims...)...)
					if err != nil || !res.Allowed {
						t.Errorf("Take(%d) = %+v, %v; want allowed (a fresh key)", i, res, err)
						return
					}
				}
			}()
		}
		wg.Wait()
	}
	start := time.Now()
	take(0, 2*maxKeys)
	full := heapInUse()
	lenFull := memorystore.Len(kv)
	maxLen := lenFull
	for from := 2 * maxKeys; from < total; from += 100_000 {
		take(from, min(from+100_000, total))
		if n := memorystore.Len(kv); n > maxLen {
			maxLen = n
		}
	}
	elapsed := time.Since(start)
	end := heapInUse()
	runtime.KeepAlive(kv)
	t.Logf("%d distinct keys in %v with WithMaxKeys(%d): Len %d once full, at most %d sampled, %d at the end",
		total, elapsed.Round(time.Millisecond), maxKeys, lenFull, maxLen, memorystore.Len(kv))
	t.Logf("heap: %.1f MB before, %.1f MB once the bound was reached (%d keys), %.1f MB after %d keys (%.0f bytes per state held)",
		mb(base), mb(full), 2*maxKeys, mb(end), total, float64(end-base)/float64(max(memorystore.Len(kv), 1)))
	if maxLen > maxKeys || memorystore.Len(kv) > maxKeys {
		t.Errorf("the store held up to %d states (%d at the end), more than its bound %d", maxLen, memorystore.Len(kv), maxKeys)
	}
	if memorystore.Len(kv) < maxKeys/2 {
		t.Errorf("the store holds %d states, under half its bound %d: it forgets more than it must", memorystore.Len(kv), maxKeys)
	}
	// Once full, the flood must not grow what the store keeps: allow 16 MB
	// for map growth (maps do not shrink) and noise, against the hundreds
	// of MB that a million kept states would take.
	if limit := full + 16<<20; end > limit {
		t.Errorf("heap grew from %.1f MB (store full) to %.1f MB after %d keys, above %.1f MB", mb(full), mb(end), total, mb(limit))
	}
}

func mb(b uint64) float64 { return float64(b) / (1 << 20) }
