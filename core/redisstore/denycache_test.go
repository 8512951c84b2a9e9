package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"reflect"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/internal/redistest"
)

// denySize is the deny cache size the tests turn on (the README's).
const denySize = 4096

// denyCases are limits whose denials the cache keeps, with the cost that
// is denied: every algorithm at cost 1, a full fixed window at a larger
// cost, and penalties (new locks and locks longer or shorter than the
// algorithm's own retry).
var denyCases = []struct {
	l store.Limit
	n int64
}{
	{store.Limit{Algorithm: store.GCRA, Rate: 3, Period: time.Second}, 1},
	{store.Limit{Algorithm: store.GCRA, Rate: 7, Period: 3 * time.Second, Burst: 2}, 1},
	{store.Limit{Algorithm: store.LeakyBucket, Rate: 4, Period: time.Second, Burst: 3}, 1},
	{store.Limit{Algorithm: store.TokenBucket, Rate: 7, Period: 3 * time.Second, Burst: 4}, 1},
	{store.Limit{Algorithm: store.FixedWindow, Rate: 5, Period: 2 * time.Second}, 1},
	{store.Limit{Algorithm: store.FixedWindow, Rate: 5, Period: 2 * time.Second}, 3},
	{store.Limit{Algorithm: store.SlidingWindow, Rate: 6, Period: 2 * time.Second}, 1},
	{store.Limit{Algorithm: store.SlidingWindow, Rate: 1, Period: 700 * time.Millisecond}, 1},
	{store.Limit{Algorithm: store.SlidingLog, Rate: 4, Period: 1500 * time.Millisecond}, 1},
	{store.Limit{Algorithm: store.GCRA, Rate: 3, Period: time.Second, Penalty: 5 * time.Second}, 1},
	{store.Limit{Algorithm: store.GCRA, Rate: 1, Period: 10 * time.Second, Penalty: time.Second}, 1},
	{store.Limit{Algorithm: store.TokenBucket, Rate: 2, Period: time.Second, Burst: 5, Penalty: time.Second}, 2},
	{store.Limit{Algorithm: store.SlidingLog, Rate: 3, Period: time.Second, Penalty: 2 * time.Second}, 1},
	{store.Limit{Algorithm: store.FixedWindow, Rate: 3, Period: time.Second, Penalty: 3 * time.Second}, 9}, // never passes
}

// A cached Store and an uncached one on two miniredis with one clock give
// identical Results at every step, and the cached one stops calling Redis
// while a denial holds, then calls it again exactly at its end.
func TestMiniDenyCacheMatchesUncached(t *testing.T) {
	redistest.Slow(t)
	rng := rand.New(rand.NewSource(7))
	steps := []time.Duration{0, time.Microsecond, 999 * time.Microsecond, 37 * time.Millisecond, 111 * time.Millisecond, 333 * time.Millisecond}
	for _, c := range denyCases {
		t.Run(fmt.Sprintf("%v cost %d", c.l, c.n), func(t *testing.T) {
			cached, plain := newMini(t, WithDenyCache(denySize)), newMini(t)
			cached.advance(123456789 * time.Microsecond)
			plain.advance(123456789 * time.Microsecond)
			hits := 0
			for i := 0; i < 150; i++ {
				d := steps[rng.Intn(len(steps))]
				cached.advance(d)
				plain.advance(d)
				n := c.n
				if rng.Intn(4) == 0 {
					n = 1 // traffic of other costs on the same key
				}
				before := cached.calls()
				got, want := cached.take("k", n, c.l), plain.take("k", n, c.l)
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("step %d, cost %d: cached %+v, uncached %+v", i, n, got, want)
				}
				if cached.calls() == before {
					hits++
					if got.Allowed {
						t.Fatalf("step %d: allowed without Redis", i)
					}
				}
			}
			if hits == 0 {
				t.Errorf("no Take was answered by the cache")
			}
		})
	}
}

// The cache answers until the denial's RetryAfter and not one microsecond
// longer; then the next Take goes to Redis.
func TestMiniDenyCacheExpiresAtRetry(t *testing.T) {
	for _, c := range denyCases {
		x := newMini(t, WithDenyCache(denySize))
		key := fmt.Sprint("exp:", c.l, c.n)
		for i := 0; x.take(key, 1, c.l).Allowed; i++ {
			if i > 100 {
				t.Fatalf("%v: never denied", c.l)
			}
		}
		first := x.take(key, c.n, c.l)
		until := first.RetryAfter
		if c.l.Penalty > 0 && until > c.l.Penalty {
			until = c.l.Penalty // cached only while the lock holds
		}
		x.advance(until - time.Microsecond)
		before := x.calls()
		r := x.take(key, c.n, c.l)
		if x.calls() != before {
			t.Errorf("%v: Take 1µs before the end went to Redis", c.l)
		}
		if r.Allowed || r.RetryAfter != first.RetryAfter-until+time.Microsecond {
			t.Errorf("%v: 1µs before the end: %+v (first denial %+v)", c.l, r, first)
		}
		x.advance(time.Microsecond)
		before = x.calls()
		x.take(key, c.n, c.l)
		if x.calls() == before {
			t.Errorf("%v: Take at the end of the denial was answered by the cache", c.l)
		}
	}
}

// Peeks, Takes of several limits, costs whose Remaining may change and
// costs that can never pass without a penalty always go to Redis.
func TestMiniDenyCacheSkips(t *testing.T) {
	x := newMini(t, WithDenyCache(denySize))
	g := store.Limit{Algorithm: store.GCRA, Rate: 2, Period: time.Hour}
	f := store.Limit{Algorithm: store.FixedWindow, Rate: 2, Period: time.Hour}
	x.take("k", 2, g)
	x.take("k", 1, f)
	for _, c := range []struct {
		what   string
		n      int64
		limits []store.Limit
	}{
		{"peek", 0, []store.Limit{g}},
		{"two limits", 1, []store.Limit{g, f}},
		{"gcra cost 2", 2, []store.Limit{g}},
		{"never passes", 3, []store.Limit{g}},
	} {
		for i := 0; i < 3; i++ {
			before := x.calls()
			x.take("k", c.n, c.limits...)
			if x.calls() == before {
				t.Errorf("%s: take %d answered by the cache", c.what, i)
			}
		}
	}
}

// A hit allocates nothing.
func TestMiniDenyCacheHitAllocs(t *testing.T) {
	x := newMini(t, WithDenyCache(denySize))
	l := store.Limit{Algorithm: store.GCRA, Rate: 1, Period: time.Hour}
	x.take("alloc", 1, l)
	if r := x.take("alloc", 1, l); r.Allowed {
		t.Fatal("second take allowed")
	}
	ctx := context.Background()
	limits := specs(l)
	before := x.calls()
	allocs := testing.AllocsPerRun(200, func() {
		if r, err := x.store.Take(ctx, "alloc", 1, limits...); err != nil || r.Allowed {
			t.Fatalf("%+v %v", r, err)
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per cached denial, want 0", allocs)
	}
	if x.calls() != before {
		t.Errorf("cached denials reached Redis")
	}
}

// The table never grows, whatever the number of keys; bad sizes are refused.
func TestDenyCacheBounded(t *testing.T) {
	c := newDenyCache(100)
	total := 0
	for i := range c.shards {
		total += len(c.shards[i].e)
	}
	if total != 256 {
		t.Errorf("size 100: %d entries, want 256 (32 shards of one 8-way set)", total)
	}
	p := &prepared{alg: store.GCRA}
	l := store.PerHour(1)
	denied := store.Result{Limit: 1, RetryAfter: time.Hour}
	for i := 0; i < 10000; i++ {
		c.put(strconv.Itoa(i), 1, specs(l)[0], p, 0, 0, denied)
	}
	after := 0
	for i := range c.shards {
		after += len(c.shards[i].e)
		if cap(c.shards[i].e) != len(c.shards[i].e) {
			t.Errorf("shard %d grew", i)
		}
	}
	if after != total {
		t.Errorf("%d entries after 10000 keys, want %d", after, total)
	}
	if _, ok := c.get("9999", 1, specs(l)[0], 1); !ok {
		t.Error("the latest denial is not found")
	}
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer client.Close()
	for _, size := range []int{-1, maxDenyCacheSize + 1} {
		if _, err := New(client, WithDenyCache(size)); err == nil {
			t.Errorf("WithDenyCache(%d) accepted", size)
		}
	}
	s, err := New(client, WithDenyCache(0))
	if err != nil || s.deny != nil {
		t.Errorf("WithDenyCache(0): %v, cache %v", err, s.deny != nil)
	}
}

// A canceled context fails even a Take the cache could answer.
func TestMiniDenyCacheCanceled(t *testing.T) {
	x := newMini(t, WithDenyCache(denySize))
	l := store.PerHour(1)
	x.take("c", 1, l)
	x.take("c", 1, l)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := x.store.Take(ctx, "c", 1, specs(l)...); !errors.Is(err, context.Canceled) {
		t.Errorf("canceled Take: %v, want context.Canceled", err)
	}
}

// A flood of denied Takes on a real server: Redis sees under one command
// per 100 of them (INFO commandstats, the scripts' inner calls included),
// and the cached Results agree with an uncached Store's.
func TestRedisDenyCacheFlood(t *testing.T) {
	srv := redistest.StartServer(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	t.Cleanup(func() { _ = client.Close() })
	s := realStore(t, client, WithDenyCache(denySize))
	plain := realStore(t, client)
	limits := []store.Limit{
		{Algorithm: store.GCRA, Rate: 10, Period: time.Hour},
		{Algorithm: store.TokenBucket, Rate: 10, Period: time.Hour},
		{Algorithm: store.FixedWindow, Rate: 10, Period: time.Hour},
		{Algorithm: store.SlidingWindow, Rate: 10, Period: time.Hour},
		{Algorithm: store.SlidingLog, Rate: 10, Period: time.Hour},
		{Algorithm: store.LeakyBucket, Rate: 10, Period: time.Hour},
		{Algorithm: store.GCRA, Rate: 10, Period: time.Hour, Penalty: time.Minute},
	}
	const keys = 20
	ctx := context.Background()
	for _, l := range limits {
		for k := 0; k < keys; k++ {
			for i := 0; ; i++ {
				if r := takeOK(t, s, fmt.Sprint("flood", k), 1, l); !r.Allowed {
					break
				}
				if i > 20 {
					t.Fatalf("%v: never denied", l)
				}
			}
		}
	}
	resetStats(t, client)
	var takes atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 2000; i++ {
				l := limits[(g+i)%len(limits)]
				r, err := s.Take(ctx, fmt.Sprint("flood", (g*7+i)%keys), 1, specs(l)...)
				if err != nil || r.Allowed {
					t.Errorf("%v: %+v %v", l, r, err)
					return
				}
				takes.Add(1)
			}
		}(g)
	}
	wg.Wait()
	calls := 0
	for _, c := range commandStats(t, client) {
		calls += c
	}
	if calls*100 >= int(takes.Load()) {
		t.Errorf("%d denied Takes cost Redis %d commands (%v), want under 1 per 100", takes.Load(), calls, commandStats(t, client))
	}

	// Cached figures against Redis' own, read just after.
	for _, l := range limits {
		start := time.Now()
		got := takeOK(t, s, "flood3", 1, l)
		want := takeOK(t, plain, "flood3", 1, l)
		elapsed := time.Since(start)
		if got.Allowed || got.Limit != want.Limit || got.Remaining != want.Remaining || got.Delay != 0 {
			t.Errorf("%v: cached %+v, Redis %+v", l, got, want)
		}
		// The cache counts from before Redis decided: never later than
		// Redis, and early by no more than a round trip or two.
		for _, f := range [][2]time.Duration{{got.RetryAfter, want.RetryAfter}, {got.ResetAfter, want.ResetAfter}} {
			if f[0] > f[1]+elapsed || f[0] < f[1]-slack {
				t.Errorf("%v: cached %v, Redis %v (%v apart)", l, f[0], f[1], elapsed)
			}
		}
	}
}

// A flood cycling over 1000 denied keys with the default size: after one
// round, almost every Take is a hit (the bench's deny path).
func TestDenyCacheCycleHits(t *testing.T) {
	c := newDenyCache(denySize)
	p := &prepared{alg: store.GCRA}
	l := store.PerHour(10)
	denied := store.Result{Limit: 10, RetryAfter: time.Hour}
	misses := 0
	for round := 0; round < 3; round++ {
		for k := 0; k < 1000; k++ {
			key := "k" + strconv.Itoa(k)
			if _, ok := c.get(key, 1, specs(l)[0], int64(round)); !ok {
				if round > 0 {
					misses++
				}
				c.put(key, 1, specs(l)[0], p, int64(round), 0, denied)
			}
		}
	}
	if misses > 20 {
		t.Errorf("%d misses in 2000 Takes on 1000 cached keys, want at most 1%%", misses)
	}
}
