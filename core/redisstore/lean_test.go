package redisstore

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/internal/redistest"
)

// A Take of one limit without a penalty runs its family's lean script with
// one key; a penalty or several limits run the take script.
func TestScriptChoice(t *testing.T) {
	x := newMini(t)
	want := map[store.Algorithm]*script{store.GCRA: tatScript, store.LeakyBucket: tatScript, store.TokenBucket: tokenScript, store.FixedWindow: fixedScript, store.SlidingWindow: slidingScript, store.SlidingLog: logScript}
	for _, l := range allAlgorithms() {
		c, err := x.store.call("k", 1, specs(l))
		if err != nil {
			t.Fatal(err)
		}
		if keys, _ := c.keysArgs(); c.script != want[l.Algorithm] || len(keys) != 1 || keys[0] != x.keyOf("k", l) {
			t.Errorf("%v: script %s keys %v, want %s and the state key", l, c.script.Hash(), keys, want[l.Algorithm].Hash())
		}
		l.Penalty = time.Second
		c, _ = x.store.call("k", 1, specs(l))
		if keys, _ := c.keysArgs(); c.script != takeScript || len(keys) != 2 {
			t.Errorf("%v: keys %v, want the take script with state and lock", l, keys)
		}
	}
	if c, _ := x.store.call("k", 1, specs(allAlgorithms()...)); c.script != takeScript {
		t.Error("several limits: not the take script")
	}
}

// One limit charged alternately alone (its lean script) and together with
// a loose second limit (the take script), on one key: every Result equals
// the memory store's, so both scripts read and write one state format.
func TestLeanAndTakeShareState(t *testing.T) {
	x := newMini(t)
	x.advance(123456789 * time.Microsecond)
	mem := memorystore.New(memorystore.WithClock(func() time.Time { return x.now }))
	loose := store.Limit{Algorithm: store.GCRA, Rate: 1000, Period: time.Millisecond, Burst: 1 << 20}
	ctx := context.Background()
	for _, l := range allAlgorithms() {
		key := "share:" + string(l.Algorithm)
		for i := 0; i < 40; i++ {
			limits := []store.Limit{l}
			if i%2 == 1 {
				limits = append(limits, loose)
			}
			n := int64(1 + i%3)
			want, _ := mem.Take(ctx, key, n, specs(limits...)...)
			got := x.take(key, n, limits...)
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("%v step %d (%d limits): redis %+v, memory %+v", l, i, len(limits), got, want)
			}
			x.advance(time.Duration(37*i%200) * time.Millisecond)
		}
	}
}

// After SCRIPT FLUSH, one Take loads every script again, so that the other
// families do not each meet NOSCRIPT.
func TestReloadEveryScript(t *testing.T) {
	x := newMini(t)
	ctx := context.Background()
	x.take("k", 1, store.PerSecond(1))
	if err := x.client.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	x.take("k", 1, store.PerSecond(1))
	for _, s := range allScripts {
		if ok, err := s.Exists(ctx, x.client).Result(); err != nil || len(ok) != 1 || !ok[0] {
			t.Errorf("script %s not loaded after a Take met NOSCRIPT: %v %v", s.Hash(), ok, err)
		}
	}
}

// clocked returns the source of script with Redis' clock replaced by a
// function of the test's (µs) and every TTL an hour longer, as the take
// script's real-Redis differential test does (see redisMatches).
func clocked(t *testing.T, sc *script) func(us int64) string {
	t.Helper()
	src := map[*script]string{takeScript: takeSource, tatScript: tatSource, tokenScript: tokenSource,
		fixedScript: fixedSource, slidingScript: slidingSource, logScript: logSource,
		tatScript.batch: tatBatch, tokenScript.batch: tokenBatch, fixedScript.batch: fixedBatch,
		slidingScript.batch: slidingBatch, logScript.batch: logBatch, takeScript.batch: takeBatch}[sc]
	clock := "local t = redis.call('TIME')"
	if sc == takeScript || sc == takeScript.batch {
		clock = "local t = call('TIME')"
	}
	if strings.Count(src, clock) != 1 {
		t.Fatalf("script %s has no single %q to replace", sc.Hash(), clock)
	}
	src = longerTTLs(t, src)
	return func(us int64) string {
		return strings.Replace(src, clock, fmt.Sprintf("local t = {'%d', '%d'}", us/1_000_000, us%1_000_000), 1)
	}
}

// longerTTLs returns src with every TTL an hour longer: each algorithm's
// (computed in µs as "local ms = ...", see package lua) and lib.lua's px.
func longerTTLs(t *testing.T, src string) string {
	t.Helper()
	const ttl, px = "local ms = ", "local function px(ttl)"
	if !strings.Contains(src, ttl) || strings.Count(src, px) > 1 {
		t.Fatalf("script has no %q, or more than one %q, to replace", ttl, px)
	}
	src = strings.ReplaceAll(src, ttl, "local ms = 3600e6 + ")
	return strings.Replace(src, px, "local function px(ttl) ttl = ttl + 3600e6", 1)
}

// On a real redis-server, every Take as the Store sends it (lean scripts
// for one limit without a penalty, the take script otherwise, on shared
// keys) gets the memory store's Result, on the test's clock.
func TestRedisScriptsMatchMemoryStore(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	t.Cleanup(func() { _ = client.Close() })
	sources := map[*script]func(int64) string{}
	for _, sc := range allScripts {
		// lease mode's own (lease_test.go); give-backs (refund_test.go);
		// locks, for split Takes (diff_test.go, fault_reshard_test.go)
		// and the recorded twins and the fence (record_test.go)
		if sc != leaseScript && sc != refundScript && sc != lockScript && sc != fenceScript && !isTwin(sc) {
			sources[sc] = clocked(t, sc)
		}
	}
	for _, maxLimits := range []int{1, 2} {
		t.Run(fmt.Sprint("limits ", maxLimits), func(t *testing.T) {
			s := realStore(t, client, WithPrefix(fmt.Sprintf("lean%d:", maxLimits)))
			now := time.Unix(1_700_000_000, 987654_000).UTC()
			mem := memorystore.New(memorystore.WithClock(func() time.Time { return now }))
			s.wall = func() time.Time { return now } // calendar windows' boundaries around the test's clock
			calls := 0
			diffRun(t, 1500, maxLimits, mem, func() time.Time { return now }, func(d time.Duration) { now = now.Add(d) },
				func(key string, n int64, limits []store.Limit) (store.Result, error) {
					c, err := s.call(key, n, specs(limits...))
					if err != nil {
						return store.Result{}, err
					}
					if calls++; calls%500 == 0 {
						client.ScriptFlush(context.Background()) // every EVAL'd script stays cached
					}
					keys, args := c.keysArgs()
					reply, err := client.Eval(context.Background(), sources[c.script](now.UnixMicro()), keys, args...).Result()
					if err != nil {
						return store.Result{}, err
					}
					return c.decode(reply, n)
				})
		})
	}
}

// On a Cluster, the Take that meets NOSCRIPT loads every script on every
// master, not only on the one that holds its key.
func TestClusterReloadEveryScript(t *testing.T) {
	redistest.Slow(t)
	t.Parallel()
	cluster := redistest.StartCluster(t, 3, 0)
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs, MaxRetries: -1})
	t.Cleanup(func() { _ = client.Close() })
	s := realStore(t, client, WithPipelining(0))
	takeOK(t, s, "reload", 1, store.PerSecond(1))
	ctx := context.Background()
	err := client.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error { return m.ScriptFlush(ctx).Err() })
	if err != nil {
		t.Fatal(err)
	}
	takeOK(t, s, "reload", 1, store.PerSecond(1))
	err = client.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		for _, sc := range allScripts {
			if ok, err := m.ScriptExists(ctx, sc.Hash()).Result(); err != nil || !ok[0] {
				t.Errorf("%s: script %s not loaded after a Take met NOSCRIPT (%v)", m.Options().Addr, sc.Hash(), err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// isTwin reports whether sc is the recorded twin of a charging script.
func isTwin(sc *script) bool {
	for _, o := range allScripts {
		if o.twin == sc {
			return true
		}
	}
	return false
}
