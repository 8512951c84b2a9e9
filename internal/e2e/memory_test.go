package e2e

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/internal/redistest"
)

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

func mb(b uint64) float64 { return float64(b) / (1 << 20) }
