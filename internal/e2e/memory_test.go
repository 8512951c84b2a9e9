package e2e

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

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
	lenFull := kv.Len()
	maxLen := lenFull
	for from := 2 * maxKeys; from < total; from += 100_000 {
		take(from, min(from+100_000, total))
		if n := kv.Len(); n > maxLen {
			maxLen = n
		}
	}
	elapsed := time.Since(start)
	end := heapInUse()
	runtime.KeepAlive(kv)
	t.Logf("%d distinct keys in %v with WithMaxKeys(%d): Len %d once full, at most %d sampled, %d at the end",
		total, elapsed.Round(time.Millisecond), maxKeys, lenFull, maxLen, kv.Len())
	t.Logf("heap: %.1f MB before, %.1f MB once the bound was reached (%d keys), %.1f MB after %d keys (%.0f bytes per state held)",
		mb(base), mb(full), 2*maxKeys, mb(end), total, float64(end-base)/float64(max(kv.Len(), 1)))
	if maxLen > maxKeys || kv.Len() > maxKeys {
		t.Errorf("the store held up to %d states (%d at the end), more than its bound %d", maxLen, kv.Len(), maxKeys)
	}
	if kv.Len() < maxKeys/2 {
		t.Errorf("the store holds %d states, under half its bound %d: it forgets more than it must", kv.Len(), maxKeys)
	}
	// Once full, the flood must not grow what the store keeps: allow 16 MB
	// for map growth (maps do not shrink) and noise, against the hundreds
	// of MB that a million kept states would take.
	if limit := full + 16<<20; end > limit {
		t.Errorf("heap grew from %.1f MB (store full) to %.1f MB after %d keys, above %.1f MB", mb(full), mb(end), total, mb(limit))
	}
}

func mb(b uint64) float64 { return float64(b) / (1 << 20) }

// TestRedisMemoryBaseline writes tens of thousands of distinct keys to a
// fresh redis-server with every algorithm, a penalty, and limits of two
// seconds, then waits for their TTLs to lapse: DBSIZE returns to 0 and
// used_memory to its baseline, so nothing the store writes is immortal.
func TestRedisMemoryBaseline(t *testing.T) {
	keys := 5_000
	if testing.Short() {
		keys = 1_000
	}
	srv := redistest.StartServer(t)
	ctx := context.Background()
	rdb := newRedisClient(srv.Addr)
	defer rdb.Close()
	admin := srv.Client(t)
	kv := exactStore(t, rdb)
	var lims []store.Limit
	for _, alg := range store.Algorithms() {
		lims = append(lims, store.Limit{Algorithm: alg, Rate: 1, Period: 2 * time.Second, Penalty: time.Second})
	}
	// Warm up (script cache, connections), let that key lapse, then read
	// the baseline.
	if _, err := kv.Take(ctx, "warm-up", 1, specs(store.Limit{Rate: 1, Period: time.Millisecond})...); err != nil {
		t.Fatal(err)
	}
	waitDBSize(t, ctx, admin, 0, 30*time.Second)
	baseMem := usedMemory(t, ctx, admin)

	start := time.Now()
	var wg sync.WaitGroup
	const workers = 8
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < keys; i += workers {
				key := fmt.Sprintf("mem-%d", i)
				// Two requests: the second is denied and sets the locks.
				for range 2 {
					if _, err := kv.Take(ctx, key, 1, specs(lims...)...); err != nil {
						t.Errorf("Take: %v", err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	wrote := time.Since(start)
	peakKeys, err := admin.DBSize(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	peakMem := usedMemory(t, ctx, admin)
	lapse := waitDBSize(t, ctx, admin, 0, 60*time.Second)
	// Redis shrinks its hash tables in serverCron, ten times a second.
	var endMem int64
	deadline := time.Now().Add(10 * time.Second)
	for {
		endMem = usedMemory(t, ctx, admin)
		if endMem <= baseMem+512<<10 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("%d keys × %d limits × 2 requests in %v: DBSIZE %d at the peak, 0 %v after the writes ended",
		keys, len(lims), wrote.Round(time.Millisecond), peakKeys, lapse.Round(time.Millisecond))
	t.Logf("used_memory: %d bytes baseline, %d at the peak (+%.1f MB), %d after the TTLs lapsed (%+d bytes)",
		baseMem, peakMem, mb(uint64(peakMem-baseMem)), endMem, endMem-baseMem)
	if peakKeys < int64(keys) {
		t.Errorf("DBSIZE %d at the peak, fewer than the %d client keys: the test wrote less than it meant", peakKeys, keys)
	}
	if endMem > baseMem+512<<10 {
		t.Errorf("used_memory %d after every key lapsed, baseline %d: %d bytes not returned", endMem, baseMem, endMem-baseMem)
	}
}

// waitDBSize waits until DBSIZE is want and returns how long it took.
func waitDBSize(t *testing.T, ctx context.Context, rdb *redis.Client, want int64, max time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		n, err := rdb.DBSize(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		if n == want {
			return time.Since(start)
		}
		if time.Since(start) > max {
			t.Fatalf("DBSIZE still %d after %v, want %d: keys outlive their TTL", n, max, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// usedMemory reads used_memory from INFO memory.
func usedMemory(t *testing.T, ctx context.Context, rdb *redis.Client) int64 {
	t.Helper()
	info, err := rdb.Info(ctx, "memory").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("INFO memory has no used_memory")
	return 0
}
