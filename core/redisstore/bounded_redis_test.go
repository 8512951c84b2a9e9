package redisstore

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/internal/redistest"
)

// boundedProbe takes from a store on its own redis-server and reports what
// each Take did to its first limit's key.
type boundedProbe struct {
	t      *testing.T
	client *redis.Client
	s      *Store
}

// maxNewBytes is the most one Take may add to a key's MEMORY USAGE.
const maxNewBytes = 64 << 10

// take runs one Take and checks that it grew the first limit's key by less
// than maxNewBytes and, for a sliding log, by at most one member, and that
// it removed at most 1024. With -v it logs the script's time inside Redis
// (SLOWLOG, which the test sets to log every command).
func (p *boundedProbe) take(what, key string, n int64, limits ...store.Limit) store.Result {
	p.t.Helper()
	ctx := context.Background()
	spec, err := limits[0].Spec()
	if err != nil {
		p.t.Fatal(err)
	}
	rk := p.s.redisKey(key, stateSuffix(&spec))
	memBefore, cardBefore := p.usage(rk), p.client.ZCard(ctx, rk).Val()
	if err := p.client.SlowLogReset(ctx).Err(); err != nil {
		p.t.Fatal(err)
	}
	r := takeOK(p.t, p.s, key, n, limits...)
	memAfter, cardAfter := p.usage(rk), p.client.ZCard(ctx, rk).Val()
	if grew := memAfter - memBefore; grew >= maxNewBytes {
		p.t.Errorf("%s: one Take of %d added %d bytes to the key (%d → %d), want under %d", what, n, grew, memBefore, memAfter, maxNewBytes)
	}
	if cardAfter > cardBefore+1 || cardBefore-cardAfter > 1024 {
		p.t.Errorf("%s: one Take of %d took the log from %d to %d members, want at most one more and at most 1024 fewer", what, n, cardBefore, cardAfter)
	}
	p.t.Logf("%-52s %5d µs in Redis, %+9d bytes, %6d → %6d members, allowed %v", what, p.scriptMicros(), memAfter-memBefore, cardBefore, cardAfter, r.Allowed)
	return r
}

// usage is the key's MEMORY USAGE, every element counted (0 when absent).
func (p *boundedProbe) usage(key string) int64 {
	n, err := p.client.MemoryUsage(context.Background(), key, 0).Result()
	if err != nil && err != redis.Nil {
		p.t.Fatal(err)
	}
	return n
}

// scriptMicros is the time of the last script call inside Redis.
func (p *boundedProbe) scriptMicros() int64 {
	logs, err := p.client.SlowLogGet(context.Background(), 128).Result()
	if err != nil {
		p.t.Fatal(err)
	}
	for _, l := range logs {
		if len(l.Args) > 0 && strings.HasPrefix(strings.ToUpper(l.Args[0]), "EVAL") {
			return l.Duration.Microseconds()
		}
	}
	p.t.Fatal("no script call in SLOWLOG")
	return 0
}

// fillLog writes members straight into a log's key: count requests of one
// unit each, numbered from 0, stamped at (Redis' clock + offset), with no
// TTL, as the scripts would have written them (stamps may lie in the past).
func (p *boundedProbe) fillLog(key string, l store.Limit, count int, offset time.Duration) {
	p.t.Helper()
	ctx := context.Background()
	spec, _ := l.Spec()
	rk := p.s.redisKey(key, stateSuffix(&spec))
	now, err := p.client.Time(ctx).Result()
	if err != nil {
		p.t.Fatal(err)
	}
	stamp := float64(now.Add(offset).UnixMicro())
	for i := 0; i < count; i += 10000 {
		zs := make([]redis.Z, 0, 10000)
		for j := i; j < min(count, i+10000); j++ {
			zs = append(zs, redis.Z{Score: stamp, Member: fmt.Sprintf("%016x", j)})
		}
		if err := p.client.ZAdd(ctx, rk, zs...).Err(); err != nil {
			p.t.Fatal(err)
		}
	}
}

// The work of one Take is bounded whatever its cost (issue 20, point 3):
// the largest cost every algorithm admits, and costs past it, add less
// than 64 KB to Redis' memory; a sliding log records a request of any cost
// as one member and removes at most 1024 expired ones per call, by the
// lean script and by the take script (a second limit) alike, in the worst
// states: empty, full of live one-unit members, full of expired ones, and a
// denial that searches a weighted log for its retry. The times inside Redis
// are logged (go test -run TestRedisTakeBounded -v), not judged: the
// figures of ALGORITHMS.md come from this test.
func TestRedisTakeBounded(t *testing.T) {
	redistest.Slow(t)
	srv := redistest.StartServer(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	t.Cleanup(func() { _ = client.Close() })
	ctx := context.Background()
	if err := client.ConfigSet(ctx, "slowlog-log-slower-than", "0").Err(); err != nil {
		t.Fatal(err)
	}
	p := &boundedProbe{t: t, client: client, s: realStore(t, client)}
	takeOK(t, p.s, "warm", 0, store.PerSecond(1)) // loads the scripts
	loose := store.Limit{Algorithm: store.GCRA, Rate: 1000, Period: time.Millisecond, Burst: 1 << 52}

	// The O(1) algorithms at sizes near their bounds: the largest cost
	// they admit, then one that can never pass.
	for _, l := range []store.Limit{
		{Algorithm: store.GCRA, Rate: 1_000_000, Period: time.Second, Burst: 1 << 40},
		{Algorithm: store.LeakyBucket, Rate: 1_000_000, Period: time.Second, Burst: 1 << 40},
		{Algorithm: store.TokenBucket, Rate: 1 << 32, Period: time.Second, Burst: 1 << 32},
		{Algorithm: store.FixedWindow, Rate: 1 << 52, Period: time.Second},
		{Algorithm: store.SlidingWindow, Rate: 1 << 31, Period: time.Second},
	} {
		spec, _ := l.Spec()
		for i, limits := range [][]store.Limit{{l}, {l, loose}} {
			key := fmt.Sprint(l.Algorithm, i)
			if r := p.take(fmt.Sprintf("%s, %d limits, its capacity", l.Algorithm, len(limits)), key, spec.Capacity(), limits...); !r.Allowed {
				t.Errorf("%v: its capacity denied on a fresh key", l)
			}
			p.take(fmt.Sprintf("%s, %d limits, cost 2^63-1", l.Algorithm, len(limits)), key, math.MaxInt64, limits...)
		}
	}

	R := int64(100_000)
	l := store.Limit{Algorithm: store.SlidingLog, Rate: R, Period: time.Hour}
	for i, limits := range [][]store.Limit{{l}, {l, loose}} {
		script := [...]string{"log.lua", "take.lua"}[i]
		key := func(name string) string { return fmt.Sprint(name, i) }
		if r := p.take(script+": empty, cost R", key("empty"), R, limits...); !r.Allowed || r.Remaining != 0 {
			t.Errorf("%s: a cost of R on an empty log: %+v", script, r)
		}
		p.take(script+": full (one member of R), cost 1", key("empty"), 1, limits...)

		p.fillLog(key("live"), l, int(R), -time.Minute)
		if r := p.take(script+": R live members, cost R", key("live"), R, limits...); r.Allowed || r.RetryAfter < 58*time.Minute {
			t.Errorf("%s: a cost of R on a full log: %+v", script, r)
		}
		p.take(script+": R live members, cost 2", key("live"), 2, limits...)

		p.fillLog(key("expired"), l, int(R), -2*time.Hour)
		if r := p.take(script+": R expired members, cost R", key("expired"), R, limits...); !r.Allowed {
			t.Errorf("%s: a cost of R on an expired log denied: %+v", script, r)
		}

		// A denial whose retry lies inside a weighted member: the search.
		takeOK(t, p.s, key("search"), 1, limits...)
		takeOK(t, p.s, key("search"), R-1, limits...)
		if r := p.take(script+": members of 1 and R-1, cost 2 (search)", key("search"), 2, limits...); r.Allowed || r.RetryAfter < 59*time.Minute {
			t.Errorf("%s: a cost of 2 on a full weighted log: %+v", script, r)
		}
		p.take(script+": cost 2^63-1", key("search"), math.MaxInt64, limits...)
	}
}
