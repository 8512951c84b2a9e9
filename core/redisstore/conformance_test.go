package redisstore_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/core/storetest"
	"github.com/sluicehq/sluice/internal/redistest"
)

// The conformance suite (core/storetest) on every kind of Redis the Store
// supports: miniredis with a clock the suite controls (every figure exact),
// a real redis-server and a real 3-master Redis Cluster (on the wall clock).
// The real ones fail rather than skip when redis-server is missing and
// CI=true (see internal/redistest).

// conformancePrefix returns a key prefix no other test uses, so that the
// suite's key listing sees only its own keys.
func conformancePrefix(tb testing.TB) string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		tb.Fatal(err)
	}
	return "conformance-" + hex.EncodeToString(b[:]) + ":"
}

// newStore returns a Store on client under prefix; every other one has the
// deny cache on, so that the suite, which alternates between two
// instances, runs through both.
func newStore(tb testing.TB, client redis.UniversalClient, prefix string, opts ...redisstore.Option) store.Store {
	tb.Helper()
	if storeSeq.Add(1)%2 == 0 {
		opts = append(opts, redisstore.WithDenyCache(4096))
	}
	s, err := redisstore.New(client, append(append(redisstore.Bare(), redisstore.WithPrefix(prefix)), opts...)...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = s.Close() })
	redisstore.WaitListening(tb, s)
	return s
}

var storeSeq atomic.Int64

// forEachNode runs f on client, or on every master of a Cluster client.
func forEachNode(ctx context.Context, client redis.UniversalClient, f func(context.Context, *redis.Client) error) error {
	if c, ok := client.(*redis.ClusterClient); ok {
		return c.ForEachMaster(ctx, f)
	}
	return f(ctx, client.(*redis.Client))
}

// listKeys returns every key under prefix with its TTL (SCAN and PTTL on
// every master); keys that expire meanwhile are left out, as are keys
// whose PTTL is 0, expiring as it is read (a window's state at its end,
// read by a step that ran a little late on a busy machine).
func listKeys(tb testing.TB, client redis.UniversalClient, prefix string) []storetest.KeyTTL {
	tb.Helper()
	var mu sync.Mutex
	var out []storetest.KeyTTL
	err := forEachNode(context.Background(), client, func(ctx context.Context, node *redis.Client) error {
		iter := node.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			key := iter.Val()
			ttl, err := node.PTTL(ctx, key).Result()
			if err != nil {
				return err
			}
			switch ttl {
			case -2, 0: // gone since the SCAN, or expiring this millisecond
				continue
			case -1: // no expiry
				ttl = -1
			}
			mu.Lock()
			out = append(out, storetest.KeyTTL{Key: key, TTL: ttl})
			mu.Unlock()
		}
		return iter.Err()
	})
	if err != nil {
		tb.Fatalf("listing keys: %v", err)
	}
	return out
}

func flushScripts(tb testing.TB, client redis.UniversalClient) {
	tb.Helper()
	err := forEachNode(context.Background(), client, func(ctx context.Context, node *redis.Client) error {
		return node.ScriptFlush(ctx).Err()
	})
	if err != nil {
		tb.Fatalf("SCRIPT FLUSH: %v", err)
	}
}

func TestConformanceMiniredis(t *testing.T) {
	m := miniredis.RunT(t)
	var mu sync.Mutex
	// Not on a window boundary: the suite aligns where it needs to.
	now := time.Unix(1_700_000_000, 987_654_000)
	m.SetTime(now)
	dial := func(tb testing.TB) *redis.Client {
		c := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1})
		tb.Cleanup(func() { _ = c.Close() })
		return c
	}
	admin := dial(t)
	prefix := conformancePrefix(t)
	clock := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return now
	}
	storetest.Run(t, storetest.Harness{
		// The deny cache (on in every other instance) follows the suite's
		// clock.
		NewStore: func(tb testing.TB) store.Store {
			return newStore(tb, dial(tb), prefix, redisstore.WithTestClock(clock))
		},
		Now: clock,
		// TIME and the TTLs move together.
		Advance: func(_ testing.TB, d time.Duration) {
			mu.Lock()
			defer mu.Unlock()
			now = now.Add(d)
			m.SetTime(now)
			m.FastForward(d)
		},
		Keys:         func(tb testing.TB) []storetest.KeyTTL { return listKeys(tb, admin, prefix) },
		FlushScripts: func(tb testing.TB) { flushScripts(tb, admin) },
		// A fresh Lua interpreter per script call makes a Take cost about a
		// millisecond; the full-size cases run on the memory store, and the
		// full concurrency case on the real servers below.
		Light: true,
	})
}

func TestConformanceRedis(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	dial := func(tb testing.TB) *redis.Client {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
		tb.Cleanup(func() { _ = c.Close() })
		return c
	}
	admin := dial(t)
	prefix := conformancePrefix(t)
	storetest.Run(t, storetest.Harness{
		NewStore:     func(tb testing.TB) store.Store { return newStore(tb, dial(tb), prefix) },
		Keys:         func(tb testing.TB) []storetest.KeyTTL { return listKeys(tb, admin, prefix) },
		FlushScripts: func(tb testing.TB) { flushScripts(tb, admin) },
	})
}

func TestConformanceCluster(t *testing.T) {
	redistest.Slow(t)
	t.Parallel()
	cluster := redistest.SharedCluster(t)
	dial := func(tb testing.TB) *redis.ClusterClient {
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs, MaxRetries: -1})
		tb.Cleanup(func() { _ = c.Close() })
		return c
	}
	admin := dial(t)
	prefix := conformancePrefix(t)
	storetest.Run(t, storetest.Harness{
		NewStore:     func(tb testing.TB) store.Store { return newStore(tb, dial(tb), prefix) },
		Keys:         func(tb testing.TB) []storetest.KeyTTL { return listKeys(tb, admin, prefix) },
		FlushScripts: func(tb testing.TB) { flushScripts(tb, admin) },
	})
}
