package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/internal/redistest"
)

// hostileSeq numbers the prefixes of FuzzKeyLayout's iterations.
var hostileSeq atomic.Int64

// maxRedisKeyOverhead bounds what the Store adds to its prefix: the hash
// tag of a (possibly hashed) client key and the limit's identity.
const maxRedisKeyOverhead = 160

// FuzzKeyLayout sends two arbitrary client keys (braces, separators,
// newlines, NUL, 64 KiB) through the Store to a real Redis Cluster, under a
// fresh prefix per input: every Take succeeds (all the Redis keys of one
// Take share a slot, or the Cluster would answer CROSSSLOT), no Redis key
// exceeds the prefix plus a fixed bound, every client key gets its own hash
// tag, and distinct client keys never share state (spending one's
// allowance leaves the other's whole).
func FuzzKeyLayout(f *testing.F) {
	big := strings.Repeat("k", 64<<10)
	for _, s := range [][2]string{
		{"victim", "{victim}"},
		{"a:b", "a"},
		{"{", "}"},
		{"a}b{c", "a{b}c"},
		{"line\nbreak", "line\rbreak"},
		{"nul\x00a", "nul\x00b"},
		{big, big + "x"},
		{big[:64], big[:65]},
		{"=victim", "victim"},
		{"#0123456789abcdef0123456789abcdef", "x"},
		{"\r\n*1\r\n$8\r\nFLUSHALL\r\n", "*"},
		{"same", "same"},
		{"", "empty"},
		{"\xff\xfe\xfd", "ключ"},
	} {
		f.Add(s[0], s[1])
	}
	c := redistest.SharedCluster(f)
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs, MaxRetries: -1})
	f.Cleanup(func() { _ = rdb.Close() })
	ctx := context.Background()
	lims := []store.Limit{
		{Algorithm: store.FixedWindow, Rate: 1, Period: 10 * time.Second, Penalty: 10 * time.Second},
		{Algorithm: store.SlidingLog, Rate: 2, Period: 10 * time.Second},
	}
	f.Fuzz(func(t *testing.T, k1, k2 string) {
		prefix := fmt.Sprintf("fz%d-%d:", os.Getpid(), hostileSeq.Add(1))
		rs, err := redisstore.New(rdb, redisstore.WithPrefix(prefix))
		if err != nil {
			t.Fatal(err)
		}
		if k1 == "" {
			if _, err := rs.Take(ctx, k1, 1, specs(lims...)...); !errors.Is(err, store.ErrEmptyKey) {
				t.Fatalf("empty key: error %v, want ErrEmptyKey", err)
			}
			return
		}
		for i, want := range []bool{true, false} {
			res, err := rs.Take(ctx, k1, 1, specs(lims...)...)
			if err != nil {
				t.Fatalf("Take %d of %.60q: %v", i+1, k1, err)
			}
			if res.Allowed != want {
				t.Fatalf("Take %d of a fresh %.60q: allowed %v, want %v", i+1, k1, res.Allowed, want)
			}
		}
		distinct := 1
		if k2 != "" && k2 != k1 {
			distinct++
			res, err := rs.Take(ctx, k2, 1, specs(lims...)...)
			if err != nil {
				t.Fatalf("Take of %.60q: %v", k2, err)
			}
			if !res.Allowed {
				t.Fatalf("%.60q denied after %.60q spent its allowance: they share state", k2, k1)
			}
		}

		var (
			mu   sync.Mutex
			keys []string
		)
		err = rdb.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
			ks, err := node.Keys(ctx, prefix+"*").Result()
			mu.Lock()
			keys = append(keys, ks...)
			mu.Unlock()
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		tags := map[string][]string{}
		for _, k := range keys {
			if len(k) > len(prefix)+maxRedisKeyOverhead {
				t.Fatalf("Redis key of %d bytes for client keys of %d and %d bytes: %.80q", len(k), len(k1), len(k2), k)
			}
			open, close := strings.IndexByte(k, '{'), strings.IndexByte(k, '}')
			if open < 0 || close < open {
				t.Fatalf("Redis key %q has no hash tag", k)
			}
			tags[k[open+1:close]] = append(tags[k[open+1:close]], k)
		}
		if len(tags) != distinct {
			t.Fatalf("%d hash tags for %d distinct client keys: %q", len(tags), distinct, keys)
		}
		for _, ks := range tags {
			slot, err := rdb.ClusterKeySlot(ctx, ks[0]).Result()
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range ks[1:] {
				if s, err := rdb.ClusterKeySlot(ctx, k).Result(); err != nil || s != slot {
					t.Fatalf("%q in slot %d, %q in slot %d (%v)", ks[0], slot, k, s, err)
				}
			}
		}
	})
}
