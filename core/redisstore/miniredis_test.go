package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/internal/redistest"
)

// t0 is a whole multiple of every window the tests use (10 s, 1 min).
var t0 = time.Unix(1_700_000_040, 0).UTC()

// mini is a Store on a miniredis whose clock only moves when told.
type mini struct {
	tb     testing.TB
	m      *miniredis.Miniredis
	client *redis.Client
	store  *Store
	now    time.Time
	sent   *decisionCalls
}

// decisionCalls counts the commands a client sends, but those of the
// Store's background work (PUBSUB NUMSUB, INFO), whose timing a test does
// not control.
type decisionCalls struct{ n atomic.Int64 }

func (c *decisionCalls) note(cmds ...redis.Cmder) {
	for _, cmd := range cmds {
		if name := cmd.Name(); name != "pubsub" && name != "info" {
			c.n.Add(1)
		}
	}
}

func (c *decisionCalls) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *decisionCalls) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.note(cmd)
		return next(ctx, cmd)
	}
}

func (c *decisionCalls) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.note(cmds...)
		return next(ctx, cmds)
	}
}

// calls returns the number of commands x's Store sent for decisions.
func (x *mini) calls() int64 { return x.sent.n.Load() }

func newMini(tb testing.TB, opts ...Option) *mini {
	tb.Helper()
	m := miniredis.RunT(tb)
	client := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1})
	tb.Cleanup(func() { _ = client.Close() })
	sent := &decisionCalls{}
	client.AddHook(sent)
	s, err := New(client, append(bare(), opts...)...)
	if err != nil {
		tb.Fatal(err)
	}
	x := &mini{tb: tb, m: m, client: client, store: s, now: t0, sent: sent}
	s.clock = func() int64 { return x.now.UnixMicro() } // the deny cache follows miniredis' clock
	m.SetTime(t0)
	tb.Cleanup(func() { _ = s.Close() })
	waitListening(tb, s)
	return x
}

// advance moves Redis' clock (TIME) and its TTLs together.
func (x *mini) advance(d time.Duration) {
	x.now = x.now.Add(d)
	x.m.SetTime(x.now)
	x.m.FastForward(d)
}

func (x *mini) take(key string, n int64, limits ...store.Limit) store.Result {
	x.tb.Helper()
	r, err := x.store.Take(context.Background(), key, n, specs(limits...)...)
	if err != nil {
		x.tb.Fatalf("Take(%q, %d, %v): %v", key, n, limits, err)
	}
	return r
}

// ttlsAll checks that every key in Redis has a positive TTL.
func (x *mini) ttlsAll() {
	x.tb.Helper()
	for _, k := range x.m.Keys() {
		if ttl := x.m.TTL(k); ttl <= 0 {
			x.tb.Errorf("key %q has TTL %v, want > 0", k, ttl)
		}
	}
}

// want is the expected figures of a Result (Binding and PerLimit aside).
type want struct {
	allowed          bool
	limit, remaining int64
	retry, reset     time.Duration
	delay            time.Duration
}

func check(tb testing.TB, what string, got store.Result, w want) {
	tb.Helper()
	g := want{got.Allowed, got.Limit, got.Remaining, got.RetryAfter, got.ResetAfter, got.Delay}
	if g != w {
		tb.Errorf("%s:\n got allowed=%v limit=%d remaining=%d retry=%v reset=%v delay=%v\nwant allowed=%v limit=%d remaining=%d retry=%v reset=%v delay=%v",
			what, g.allowed, g.limit, g.remaining, g.retry, g.reset, g.delay,
			w.allowed, w.limit, w.remaining, w.retry, w.reset, w.delay)
	}
}

const inf = store.InfDuration

func TestMiniGCRA(t *testing.T) {
	x := newMini(t)
	// The ALGORITHMS.md example: CL.THROTTLE k 15 30 60.
	l := store.Limit{Algorithm: store.GCRA, Rate: 30, Period: time.Minute, Burst: 16}
	check(t, "first", x.take("k", 1, l), want{true, 16, 15, 0, 2 * time.Second, 0})
	for i := 2; i <= 16; i++ {
		check(t, fmt.Sprint("take ", i), x.take("k", 1, l), want{true, 16, int64(16 - i), 0, time.Duration(2*i) * time.Second, 0})
	}
	check(t, "17th", x.take("k", 1, l), want{false, 16, 0, 2 * time.Second, 32 * time.Second, 0})
	check(t, "n > burst", x.take("k", 17, l), want{false, 16, 0, inf, 32 * time.Second, 0})
	x.advance(3 * time.Second)
	check(t, "peek after 3s", x.take("k", 0, l), want{true, 16, 1, 0, 29 * time.Second, 0})
	check(t, "after 3s", x.take("k", 1, l), want{true, 16, 0, 0, 31 * time.Second, 0})
	x.ttlsAll()

	one := store.Limit{Algorithm: store.GCRA, Rate: 1, Period: 2 * time.Second, Burst: 1}
	check(t, "1/2s first", x.take("o", 1, one), want{true, 1, 0, 0, 2 * time.Second, 0})
	check(t, "1/2s second", x.take("o", 1, one), want{false, 1, 0, 2 * time.Second, 2 * time.Second, 0})
	x.advance(1500 * time.Millisecond)
	check(t, "1/2s after 1.5s", x.take("o", 1, one), want{false, 1, 0, 500 * time.Millisecond, 500 * time.Millisecond, 0})
	x.advance(500 * time.Millisecond)
	check(t, "1/2s after 2s", x.take("o", 1, one), want{true, 1, 0, 0, 2 * time.Second, 0})
	x.ttlsAll()
}

func TestMiniLeakyBucket(t *testing.T) {
	x := newMini(t)
	l := store.Limit{Algorithm: store.LeakyBucket, Rate: 1, Period: time.Second, Burst: 2}
	check(t, "1st", x.take("k", 1, l), want{true, 3, 2, 0, time.Second, 0})
	check(t, "2nd", x.take("k", 1, l), want{true, 3, 1, 0, 2 * time.Second, time.Second})
	check(t, "peek", x.take("k", 0, l), want{true, 3, 1, 0, 2 * time.Second, 0})
	check(t, "3rd", x.take("k", 1, l), want{true, 3, 0, 0, 3 * time.Second, 2 * time.Second})
	check(t, "4th", x.take("k", 1, l), want{false, 3, 0, time.Second, 3 * time.Second, 0})
	check(t, "n > burst+1", x.take("k", 4, l), want{false, 3, 0, inf, 3 * time.Second, 0})
	x.advance(2500 * time.Millisecond)
	check(t, "after 2.5s", x.take("k", 2, l), want{true, 3, 0, 0, 2500 * time.Millisecond, 1500 * time.Millisecond})
	x.ttlsAll()
}

func TestMiniTokenBucket(t *testing.T) {
	x := newMini(t)
	l := store.Limit{Algorithm: store.TokenBucket, Rate: 10, Period: time.Second, Burst: 5}
	check(t, "take 3", x.take("k", 3, l), want{true, 5, 2, 0, 300 * time.Millisecond, 0})
	check(t, "take 3 again", x.take("k", 3, l), want{false, 5, 2, 100 * time.Millisecond, 300 * time.Millisecond, 0})
	check(t, "take 6", x.take("k", 6, l), want{false, 5, 2, inf, 300 * time.Millisecond, 0})
	x.advance(100 * time.Millisecond)
	check(t, "after 100ms", x.take("k", 3, l), want{true, 5, 0, 0, 500 * time.Millisecond, 0})
	x.advance(33 * time.Millisecond)
	// 0.33 tokens refilled: not one yet; the token arrives 67 ms later.
	check(t, "after 133ms", x.take("k", 1, l), want{false, 5, 0, 67 * time.Millisecond, 467 * time.Millisecond, 0})
	x.advance(time.Hour)
	check(t, "full again", x.take("k", 0, l), want{true, 5, 5, 0, 0, 0})
	x.ttlsAll()
	if keys := x.m.Keys(); len(keys) != 0 {
		t.Errorf("keys %v outlived their TTL", keys)
	}
}

func TestMiniFixedWindow(t *testing.T) {
	x := newMini(t)
	l := store.Limit{Algorithm: store.FixedWindow, Rate: 3, Period: 10 * time.Second}
	check(t, "peek fresh", x.take("k", 0, l), want{true, 3, 3, 0, 0, 0})
	x.advance(4 * time.Second)
	for i := int64(1); i <= 3; i++ {
		check(t, fmt.Sprint("take ", i), x.take("k", 1, l), want{true, 3, 3 - i, 0, 6 * time.Second, 0})
	}
	check(t, "4th", x.take("k", 1, l), want{false, 3, 0, 6 * time.Second, 6 * time.Second, 0})
	check(t, "n > rate", x.take("k", 4, l), want{false, 3, 0, inf, 6 * time.Second, 0})
	x.advance(6 * time.Second)
	check(t, "next window", x.take("k", 2, l), want{true, 3, 1, 0, 10 * time.Second, 0})
	x.ttlsAll()
}

func TestMiniSlidingWindow(t *testing.T) {
	x := newMini(t)
	l := store.Limit{Algorithm: store.SlidingWindow, Rate: 10, Period: 10 * time.Second}
	check(t, "fill", x.take("k", 10, l), want{true, 10, 0, 0, 20 * time.Second, 0})
	x.advance(15 * time.Second) // next window, e = 5 s: p = 10 weighs 5
	check(t, "peek", x.take("k", 0, l), want{true, 10, 5, 0, 5 * time.Second, 0})
	// 50 + 60 > 100: e1 = 10 - 4·10/10 = 6 s, retry 1 s.
	check(t, "take 6", x.take("k", 6, l), want{false, 10, 5, time.Second, 5 * time.Second, 0})
	check(t, "take 5", x.take("k", 5, l), want{true, 10, 0, 0, 15 * time.Second, 0})
	// c = 5, p = 10, e = 5: R-c-n < 0, so the next window: e2 = 10 - 4·10/5 = 2 s.
	check(t, "take 6 again", x.take("k", 6, l), want{false, 10, 0, 7 * time.Second, 15 * time.Second, 0})
	check(t, "n > rate", x.take("k", 11, l), want{false, 10, 0, inf, 15 * time.Second, 0})
	x.advance(7 * time.Second) // e = 2, p = 5: 5·8 + 6·10 = 100
	check(t, "take 6 after 7s", x.take("k", 6, l), want{true, 10, 0, 0, 18 * time.Second, 0})
	x.advance(20 * time.Second) // two windows on: all forgotten
	check(t, "idle", x.take("k", 0, l), want{true, 10, 10, 0, 0, 0})
	x.ttlsAll()
}

func TestMiniSlidingLog(t *testing.T) {
	x := newMini(t)
	l := store.Limit{Algorithm: store.SlidingLog, Rate: 3, Period: 10 * time.Second}
	check(t, "1", x.take("k", 1, l), want{true, 3, 2, 0, 10 * time.Second, 0})
	x.advance(time.Second)
	check(t, "2", x.take("k", 1, l), want{true, 3, 1, 0, 10 * time.Second, 0})
	x.advance(time.Second)
	check(t, "3", x.take("k", 1, l), want{true, 3, 0, 0, 10 * time.Second, 0})
	x.advance(time.Second)
	check(t, "4 denied", x.take("k", 1, l), want{false, 3, 0, 7 * time.Second, 9 * time.Second, 0})
	check(t, "2 denied", x.take("k", 2, l), want{false, 3, 0, 8 * time.Second, 9 * time.Second, 0})
	check(t, "n > rate", x.take("k", 4, l), want{false, 3, 0, inf, 9 * time.Second, 0})
	if c, _ := x.client.ZCard(context.Background(), x.keyOf("k", l)).Result(); c != 3 {
		t.Errorf("log holds %d entries after denials, want 3 (a denial must not be logged)", c)
	}
	x.advance(7 * time.Second) // the first entry is exactly P old: gone
	check(t, "after 10s", x.take("k", 1, l), want{true, 3, 0, 0, 10 * time.Second, 0})
	if c, _ := x.client.ZCard(context.Background(), x.keyOf("k", l)).Result(); c != 4 {
		t.Errorf("log holds %d entries, want 4 (the expired one, fewer than the live ones, leaves later)", c)
	}
	x.ttlsAll()
}

// The lean script removes the expired members, at most 1024, at an
// admission that finds as many as the live units (issue 29, item 5): with
// fewer expired at once, as here, an admission leaves fewer expired members
// than live units, whatever the costs, peeks and denials in between; the
// log never holds more than 2R - 1 members (ALGORITHMS.md), and the members
// it keeps change no Result. (It used to remove them only when an
// admission's unit numbers crossed a multiple of 64, or none was live.)
func TestMiniSlidingLogTrim(t *testing.T) {
	x := newMini(t)
	mem := memorystore.New(memorystore.WithClock(func() time.Time { return x.now }))
	ctx := context.Background()
	l := store.Limit{Algorithm: store.SlidingLog, Rate: 5, Period: time.Second}
	key := x.keyOf("k", l)
	trimmed := 0
	for i := range 400 {
		n := int64(1 + i%3)
		if i%7 == 3 {
			n = 0
		}
		if i%5 == 0 { // a Peek decides n and writes nothing
			before, ttl := x.m.Dump(), x.m.TTL(key)
			want, _ := mem.Peek(ctx, "k", n+2, specs(l)...)
			got, err := x.store.Peek(ctx, "k", n+2, specs(l)...)
			if err != nil || !reflect.DeepEqual(got, want) {
				t.Fatalf("step %d, peek %d: redis %+v (%v), memory %+v", i, n+2, got, err, want)
			}
			if after := x.m.Dump(); after != before || x.m.TTL(key) != ttl {
				t.Fatalf("step %d: a Peek changed the log or its TTL (%v, was %v):\n%s\n%s", i, x.m.TTL(key), ttl, before, after)
			}
		}
		expiredBefore, _ := x.client.ZCount(ctx, key, "-inf", fmt.Sprint(x.now.Add(-time.Second).UnixMicro())).Result()
		want, _ := mem.Take(ctx, "k", n, specs(l)...)
		got := x.take("k", n, l)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("step %d, n %d: redis %+v, memory %+v", i, n, got, want)
		}
		c, err := x.client.ZCard(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		if c > 2*l.Rate-1 {
			t.Fatalf("step %d: log holds %d entries, more than 2R - 1", i, c)
		}
		// the clock only moves forward here: the cut is now - P
		expired, _ := x.client.ZCount(ctx, key, "-inf", fmt.Sprint(x.now.Add(-time.Second).UnixMicro())).Result()
		if got.Allowed && n > 0 {
			if live := l.Rate - got.Remaining; expired >= live {
				t.Fatalf("step %d: an admission left %d expired entries and %d live units", i, expired, live)
			}
			if expired < expiredBefore {
				trimmed++
			}
		}
		x.advance(time.Duration(50+i%5*40) * time.Millisecond)
	}
	if trimmed < 20 {
		t.Errorf("only %d admissions found expired entries to remove: the removal was barely exercised", trimmed)
	}
	x.ttlsAll()
}

// After a step back of the clock, the entries that an admission removes
// (ALGORITHMS.md) do not count again, though the lean script leaves them in
// the set while they are fewer than the live ones: the lean script and the
// take script (here with a loose second limit) both match the memory
// store.
func TestMiniSlidingLogClockBack(t *testing.T) {
	x := newMini(t)
	mem := memorystore.New(memorystore.WithClock(func() time.Time { return x.now }))
	ctx := context.Background()
	l := store.Limit{Algorithm: store.SlidingLog, Rate: 3, Period: time.Second}
	loose := store.Limit{Algorithm: store.GCRA, Rate: 1000, Period: time.Millisecond, Burst: 1 << 20}
	for i, limits := range [][]store.Limit{{l}, {l, loose}} {
		key := fmt.Sprint("back", i)
		step := func(d time.Duration, n int64, limits ...store.Limit) {
			t.Helper()
			x.now = x.now.Add(d)
			x.m.SetTime(x.now) // TTLs do not move back
			want, _ := mem.Take(ctx, key, n, specs(limits...)...)
			if got := x.take(key, n, limits...); !reflect.DeepEqual(got, want) {
				t.Fatalf("%d limits, at %v, n %d: redis %+v, memory %+v", len(limits), x.now.Sub(t0), n, got, want)
			}
		}
		step(0, 1, l)
		step(500*time.Millisecond, 1, l)
		step(700*time.Millisecond, 1, l) // 1.2 s: the entry at 0 expired, a live one left
		if c, _ := x.client.ZCard(ctx, x.keyOf(key, l)).Result(); c != 3 {
			t.Fatalf("log holds %d entries, want 3 (the expired one kept for a later removal)", c)
		}
		step(-300*time.Millisecond, 0, limits...) // 0.9 s: the entry at 0 stays removed
		step(0, 1, limits...)
		step(0, 1, limits...)
		step(-400*time.Millisecond, 1, limits...)
		step(1100*time.Millisecond, 2, limits...)
		step(100*time.Millisecond, 2, limits...)
		step(-1500*time.Millisecond, 0, limits...)
		x.now = t0.Add(time.Duration(i+1) * time.Hour)
		x.m.SetTime(x.now)
	}
}

// Weighted requests, one member each, count their units exactly: random
// costs up to and past R, peeks, and clock steps, taken by the lean script
// alone and by the take script (a loose second limit) on the same key,
// give the memory store's Results; the retry of a denial names the stamp
// of the right unit wherever it lies in a member (the binary search of
// log.lua and take.lua's unitStamp), and the set never outgrows 2R - 1.
func TestMiniSlidingLogWeighted(t *testing.T) {
	redistest.Slow(t)
	x := newMini(t)
	mem := memorystore.New(memorystore.WithClock(func() time.Time { return x.now }))
	ctx := context.Background()
	l := store.Limit{Algorithm: store.SlidingLog, Rate: 60, Period: time.Second}
	loose := store.Limit{Algorithm: store.GCRA, Rate: 1000, Period: time.Millisecond, Burst: 1 << 20}
	key := x.keyOf("w", l)
	rng := rand.New(rand.NewPCG(20, 3))
	costs := []int64{1, 1, 1, 2, 3, 7, 13, 29, 59, 60, 61}
	searched := 0
	for i := range 3000 {
		limits := []store.Limit{l}
		if rng.IntN(3) == 0 {
			limits = append(limits, loose)
		}
		n := costs[rng.IntN(len(costs))]
		if rng.IntN(6) == 0 {
			want, _ := mem.Peek(ctx, "w", n, specs(limits...)...)
			got, err := x.store.Peek(ctx, "w", n, specs(limits...)...)
			if err != nil || !reflect.DeepEqual(got, want) {
				t.Fatalf("step %d, peek %d of %d limits: redis %+v (%v), memory %+v", i, n, len(limits), got, err, want)
			}
		}
		members, _ := x.client.ZCard(ctx, key).Result()
		want, _ := mem.Take(ctx, "w", n, specs(limits...)...)
		got := x.take("w", n, limits...)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("step %d, n %d, %d limits: redis %+v, memory %+v", i, n, len(limits), got, want)
		}
		after, _ := x.client.ZCard(ctx, key).Result()
		if after > members+1 || after > 2*l.Rate-1 {
			t.Fatalf("step %d: %d members after a take, %d before (want at most one more, and at most 2R - 1)", i, after, members)
		}
		if !got.Allowed && got.RetryAfter != inf && n > 1 {
			searched++
		}
		d := time.Duration(rng.IntN(120)) * time.Millisecond
		if rng.IntN(40) == 0 {
			d = -time.Duration(rng.IntN(500)) * time.Millisecond
		}
		x.now = x.now.Add(d)
		x.m.SetTime(x.now) // TTLs stand still: they do not move back
	}
	if searched < 100 {
		t.Errorf("only %d denials of a cost above 1: the search for a unit inside a member was barely exercised", searched)
	}
}

// Requests taken in one microsecond are distinct members of the log (the
// seeds' ZSET used the timestamp as member), one member per request
// whatever its cost: its first unit's number, and its cost when above 1.
func TestMiniSlidingLogSameMicrosecond(t *testing.T) {
	x := newMini(t)
	l := store.Limit{Algorithm: store.SlidingLog, Rate: 1000, Period: time.Minute}
	x.take("k", 3, l)
	x.take("k", 1, l)
	r := x.take("k", 2, l)
	if r.Remaining != 994 {
		t.Errorf("remaining %d, want 994", r.Remaining)
	}
	got, err := x.client.ZRangeWithScores(context.Background(), x.keyOf("k", l), 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	members := []string{"0000000000000000+3", "0000000000000003", "0000000000000004+2"}
	if len(got) != len(members) {
		t.Fatalf("log has %d members, want %d: %v", len(got), len(members), got)
	}
	stamp := float64(t0.UnixMicro())
	for i, z := range got {
		if z.Member != members[i] || z.Score != stamp {
			t.Errorf("member %d = %v@%.0f, want %s@%.0f", i, z.Member, z.Score, members[i], stamp)
		}
	}
	// A large cost is one member too.
	big := store.Limit{Algorithm: store.SlidingLog, Rate: 1500, Period: time.Minute}
	check(t, "1200 at once", x.take("b", 1200, big), want{true, 1500, 300, 0, time.Minute, 0})
	check(t, "301 more", x.take("b", 301, big), want{false, 1500, 300, time.Minute, time.Minute, 0})
	if c, _ := x.client.ZCard(context.Background(), x.keyOf("b", big)).Result(); c != 1 {
		t.Errorf("log holds %d members after one take of 1200, want 1", c)
	}
}

func TestMiniPenalty(t *testing.T) {
	x := newMini(t)
	l := store.Limit{Algorithm: store.GCRA, Rate: 1, Period: 2 * time.Second, Burst: 1, Penalty: 10 * time.Second}
	check(t, "first", x.take("k", 1, l), want{true, 1, 0, 0, 2 * time.Second, 0})
	if x.m.Exists(x.keyOf("k", l) + ":x") {
		t.Error("lock set by an allowed request")
	}
	check(t, "denied", x.take("k", 1, l), want{false, 1, 0, 10 * time.Second, 10 * time.Second, 0})
	if ttl := x.m.TTL(x.keyOf("k", l) + ":x"); ttl != 10*time.Second {
		t.Errorf("lock TTL %v, want 10s", ttl)
	}
	x.advance(3 * time.Second)
	check(t, "locked", x.take("k", 1, l), want{false, 1, 0, 7 * time.Second, 7 * time.Second, 0})
	check(t, "locked peek", x.take("k", 0, l), want{false, 1, 0, 7 * time.Second, 7 * time.Second, 0})
	if ttl := x.m.TTL(x.keyOf("k", l) + ":x"); ttl != 7*time.Second {
		t.Errorf("lock TTL %v after locked requests, want 7s (not extended)", ttl)
	}
	x.advance(7 * time.Second)
	check(t, "unlocked", x.take("k", 1, l), want{true, 1, 0, 0, 2 * time.Second, 0})
	x.ttlsAll()

	// A cost that can never pass still sets the lock; retry stays INF.
	check(t, "n > burst", x.take("k", 2, l), want{false, 1, 0, inf, 10 * time.Second, 0})
	check(t, "locked after INF", x.take("k", 1, l), want{false, 1, 0, 10 * time.Second, 10 * time.Second, 0})
}

func TestMiniMultiLimitNoCharge(t *testing.T) {
	x := newMini(t)
	ctx := context.Background()
	burst := store.Limit{Algorithm: store.GCRA, Rate: 10, Period: time.Second, Burst: 10}
	log := store.Limit{Algorithm: store.SlidingLog, Rate: 5, Period: time.Minute}
	hourly := store.Limit{Algorithm: store.FixedWindow, Rate: 1, Period: time.Minute, Penalty: 30 * time.Second}
	limits := []store.Limit{burst, log, hourly}

	r := x.take("k", 1, limits...)
	check(t, "first", r, want{true, 1, 0, 0, time.Minute, 0}) // the fixed window binds: remaining 0
	if r.Binding != 2 || len(r.PerLimit) != 3 {
		t.Fatalf("binding %d, %d per-limit results; want 2, 3", r.Binding, len(r.PerLimit))
	}
	check(t, "first gcra", r.PerLimit[0], want{true, 10, 9, 0, 100 * time.Millisecond, 0})
	check(t, "first log", r.PerLimit[1], want{true, 5, 4, 0, time.Minute, 0})

	x.advance(50 * time.Millisecond)
	r = x.take("k", 1, limits...)
	check(t, "second", r, want{false, 1, 0, 59950 * time.Millisecond, 59950 * time.Millisecond, 0})
	if r.Binding != 2 {
		t.Errorf("binding %d, want 2", r.Binding)
	}
	// The limits that allowed report a peek: nothing was charged.
	check(t, "second gcra", r.PerLimit[0], want{true, 10, 9, 0, 50 * time.Millisecond, 0})
	check(t, "second log", r.PerLimit[1], want{true, 5, 4, 0, 59950 * time.Millisecond, 0})
	if c, _ := x.client.ZCard(ctx, x.keyOf("k", log)).Result(); c != 1 {
		t.Errorf("log holds %d entries after a denied call, want 1", c)
	}
	if v, _ := x.m.Get(x.keyOf("k", burst)); v != fmt.Sprint(t0.UnixMicro()+100_000) {
		t.Errorf("gcra state %q changed by a denied call, want the first call's tat", v)
	}
	if v := x.m.HGet(x.keyOf("k", hourly), fmt.Sprint(t0.Unix()/60)); v != "1" {
		t.Errorf("fixed window count %q changed by a denied call, want 1", v)
	}
	lock := x.keyOf("k", hourly) + ":x"
	if v, _ := x.m.Get(lock); v != fmt.Sprint(t0.UnixMicro()+50_000+30_000_000) {
		t.Errorf("penalty lock %q = %q, want now + 30 s", lock, v)
	}
	if got := len(x.m.Keys()); got != 4 {
		t.Errorf("%d keys after a denied call, want 4 (3 states + 1 lock): %v", got, x.m.Keys())
	}

	// No limit locks but the one with a penalty: the others stay usable.
	check(t, "gcra alone", x.take("k", 1, burst), want{true, 10, 8, 0, 200*time.Millisecond - 50*time.Millisecond, 0})
	x.ttlsAll()
}

func TestMiniHugeCost(t *testing.T) {
	x := newMini(t)
	for _, l := range allAlgorithms() {
		for _, n := range []int64{math.MaxInt64, 1<<53 + 1, 1 << 53} {
			r := x.take("k", n, l)
			if r.Allowed || r.RetryAfter != inf {
				t.Errorf("%v n=%d: allowed=%v retry=%v, want denied with InfDuration", l, n, r.Allowed, r.RetryAfter)
			}
			if r.Remaining != r.Limit {
				t.Errorf("%v n=%d: remaining %d of %d, want untouched", l, n, r.Remaining, r.Limit)
			}
		}
	}
	if keys := x.m.Keys(); len(keys) != 0 {
		t.Errorf("denied huge costs wrote %v", keys)
	}
	r := x.take("k", math.MaxInt64, allAlgorithms()...)
	if r.Allowed || r.RetryAfter != inf || len(r.PerLimit) != len(allAlgorithms()) {
		t.Errorf("multi-limit huge cost: %+v", r)
	}
}

func allAlgorithms() []store.Limit {
	return []store.Limit{
		{Algorithm: store.GCRA, Rate: 5, Period: time.Second},
		{Algorithm: store.LeakyBucket, Rate: 5, Period: time.Second, Burst: 2},
		{Algorithm: store.TokenBucket, Rate: 5, Period: time.Second, Burst: 7},
		{Algorithm: store.FixedWindow, Rate: 5, Period: time.Second},
		{Algorithm: store.SlidingWindow, Rate: 5, Period: time.Second},
		{Algorithm: store.SlidingLog, Rate: 5, Period: time.Second},
	}
}

// Every key written has a TTL, in every path, and the database empties
// itself once they lapse.
func TestMiniTTLEverywhere(t *testing.T) {
	x := newMini(t)
	limits := allAlgorithms()
	for i := range limits {
		limits[i].Penalty = 3 * time.Second
	}
	steps := []time.Duration{0, time.Microsecond, 999 * time.Microsecond, time.Millisecond, 150 * time.Millisecond, 400 * time.Millisecond}
	for round := 0; round < 4; round++ {
		for _, d := range steps {
			x.advance(d)
			for _, l := range limits {
				x.take("solo", 1, l)
				x.take("solo", 3, l)
				x.ttlsAll()
			}
			x.take("multi", 1, limits...)
			x.take("multi", 2, limits...)
			x.ttlsAll()
		}
	}
	if len(x.m.Keys()) == 0 {
		t.Fatal("nothing written")
	}
	x.advance(3*time.Second + time.Millisecond) // longest TTL: penalty 3 s, windows 2 s
	if keys := x.m.Keys(); len(keys) != 0 {
		t.Errorf("keys left after every TTL lapsed: %v", keys)
	}
}

// The script reads Redis' clock, not the client's: miniredis says it is
// 2001, and the fixed window's reset follows that clock.
func TestMiniUsesRedisTime(t *testing.T) {
	x := newMini(t)
	x.now = time.Date(2001, 1, 1, 0, 0, 4, 0, time.UTC)
	x.m.SetTime(x.now)
	l := store.Limit{Algorithm: store.FixedWindow, Rate: 3, Period: 10 * time.Second}
	check(t, "2001", x.take("k", 1, l), want{true, 3, 2, 0, 6 * time.Second, 0})
	fields, _ := x.m.HKeys(x.keyOf("k", l))
	if want := fmt.Sprint(x.now.UnixMicro() / 10_000_000); fmt.Sprint(fields) != "["+want+"]" {
		t.Errorf("state fields %q, want [%s] (window index of Redis' clock)", fields, want)
	}
}

// Numbers are written as plain integers, never in exponent form.
func TestMiniStateEncoding(t *testing.T) {
	x := newMini(t)
	us := t0.UnixMicro()
	cases := []struct {
		l    store.Limit
		n    int64
		want string
	}{
		{store.Limit{Algorithm: store.GCRA, Rate: 1, Period: time.Hour}, 1, fmt.Sprint(us + 3_600_000_000)},
		{store.Limit{Algorithm: store.LeakyBucket, Rate: 1, Period: time.Hour}, 1, fmt.Sprint(us + 3_600_000_000)},
		{store.Limit{Algorithm: store.TokenBucket, Rate: 1, Period: time.Hour, Burst: 1000}, 1, fmt.Sprintf("%d:%d", 999*3_600_000_000, us)},
		{store.Limit{Algorithm: store.SlidingWindow, Rate: 9, Period: time.Second}, 2, fmt.Sprintf("%d:2:0", us/1_000_000)},
	}
	for _, c := range cases {
		x.take("k", c.n, c.l)
		if v, _ := x.m.Get(x.keyOf("k", c.l)); v != c.want {
			t.Errorf("%v: state %q, want %q", c.l, v, c.want)
		}
	}
	// The fixed window's hash: the window's index (here µs) → its count.
	fixed := store.Limit{Algorithm: store.FixedWindow, Rate: 9, Period: time.Microsecond}
	x.take("k", 1, fixed)
	if v := x.m.HGet(x.keyOf("k", fixed), fmt.Sprint(us)); v != "1" {
		fields, _ := x.m.HKeys(x.keyOf("k", fixed))
		t.Errorf("%v: field %d = %q, want 1 (fields %q)", fixed, us, v, fields)
	}
}

func TestMiniScriptFlush(t *testing.T) {
	x := newMini(t)
	ctx := context.Background()
	l := store.Limit{Algorithm: store.GCRA, Rate: 2, Period: time.Second}
	check(t, "before", x.take("k", 1, l), want{true, 2, 1, 0, 500 * time.Millisecond, 0})
	if err := x.client.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if ok, _ := takeScript.Exists(ctx, x.client).Result(); len(ok) != 1 || ok[0] {
		t.Fatalf("script still loaded after SCRIPT FLUSH: %v", ok)
	}
	check(t, "after flush", x.take("k", 1, l), want{true, 2, 0, 0, time.Second, 0})
	if ok, _ := takeScript.Exists(ctx, x.client).Result(); len(ok) != 1 || !ok[0] {
		t.Errorf("script not loaded again: %v", ok)
	}
}

func TestMiniInputErrors(t *testing.T) {
	x := newMini(t)
	ctx := context.Background()
	l := store.PerSecond(1)
	cases := []struct {
		name   string
		key    string
		n      int64
		limits []store.Limit
		want   error
	}{
		{"empty key", "", 1, []store.Limit{l}, store.ErrEmptyKey},
		{"negative cost", "k", -1, []store.Limit{l}, store.ErrNegativeCost},
		{"no limits", "k", 1, nil, store.ErrInvalidLimit},
		{"zero limit", "k", 1, []store.Limit{{}}, store.ErrInvalidLimit},
		{"bad second limit", "k", 1, []store.Limit{l, {Algorithm: "nope", Rate: 1, Period: time.Second}}, store.ErrInvalidLimit},
		{"burst on window", "k", 1, []store.Limit{{Algorithm: store.FixedWindow, Rate: 1, Period: time.Second, Burst: 2}}, store.ErrInvalidLimit},
	}
	for _, c := range cases {
		_, err := x.store.Take(ctx, c.key, c.n, specs(c.limits...)...)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: error %v, want %v", c.name, err, c.want)
		}
	}
	if keys := x.m.Keys(); len(keys) != 0 {
		t.Errorf("bad input wrote %v", keys)
	}
	// Redis failures are wrapped errors, never panics.
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := x.store.Take(canceled, "k", 1, specs(l)...); !errors.Is(err, context.Canceled) {
		t.Errorf("Take with a canceled context: %v, want context.Canceled", err)
	}
	for _, zero := range []*Store{nil, {}} {
		if _, err := zero.Take(ctx, "k", 1, specs(l)...); err == nil {
			t.Errorf("Take on %#v succeeded", zero)
		}
	}
	x.m.Close()
	if _, err := x.store.Take(ctx, "k", 1, specs(l)...); err == nil || !strings.HasPrefix(err.Error(), "redisstore: ") {
		t.Errorf("Take on a closed server: %v, want a redisstore error", err)
	}
}

func TestNewOptions(t *testing.T) {
	m := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer client.Close()
	if _, err := New(nil); err == nil {
		t.Error("New(nil) succeeded")
	}
	for _, p := range []string{"", "a{b", "a}b", strings.Repeat("p", maxPrefixLen+1), "a\nb", "a\x00"} {
		if _, err := New(client, WithPrefix(p)); !errors.Is(err, errInvalidPrefix) {
			t.Errorf("WithPrefix(%q): %v, want errInvalidPrefix", p, err)
		}
	}
	s, err := New(client, WithPrefix(strings.Repeat("p", maxPrefixLen)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Take(context.Background(), "k", 1, specs(store.PerSecond(1))...); err != nil {
		t.Fatal(err)
	}
	if keys := m.Keys(); len(keys) != 1 || !strings.HasPrefix(keys[0], strings.Repeat("p", maxPrefixLen)+"{=k}:") {
		t.Errorf("keys %v, want one under the custom prefix", keys)
	}
}

func (x *mini) keyOf(key string, l store.Limit) string {
	x.tb.Helper()
	spec, err := l.Spec()
	if err != nil {
		x.tb.Fatal(err)
	}
	return x.store.redisKey(key, stateSuffix(&spec))
}

func TestMiniKeyLayout(t *testing.T) {
	x := newMini(t)
	l := store.Limit{Algorithm: store.GCRA, Rate: 30, Period: time.Minute, Burst: 16, Penalty: time.Second}
	long := strings.Repeat("x", 64*1024)
	cases := []struct{ key, want string }{
		{"user:42", "sluice:{=user:42}:g30/60000000b16p1000000"},
		{"203.0.113.9", "sluice:{=203.0.113.9}:g30/60000000b16p1000000"},
		{"a@b.c/d-e_f", "sluice:{=a@b.c/d-e_f}:g30/60000000b16p1000000"},
		{strings.Repeat("k", 64), "sluice:{=" + strings.Repeat("k", 64) + "}:g30/60000000b16p1000000"},
	}
	for _, c := range cases {
		if got := x.keyOf(c.key, l); got != c.want {
			t.Errorf("key for %q = %q, want %q", c.key, got, c.want)
		}
	}
	hashed := []string{strings.Repeat("k", 65), "a{b}", "}", "{", "a b", "line\nbreak", "nul\x00", "é", long, "=user:42", "#00"}
	seen := map[string]string{}
	for _, k := range append(hashed, "user:42", "user:43") {
		x.take(k, 1, l)
		x.take(k, 1, store.Limit{Algorithm: store.GCRA, Rate: 1, Period: time.Hour, Burst: 1, Penalty: time.Hour})
		x.take(k, 1, store.Limit{Algorithm: store.GCRA, Rate: 1, Period: time.Hour, Burst: 1, Penalty: time.Hour}) // sets the lock
		rk := x.keyOf(k, l)
		if prev, dup := seen[rk]; dup {
			t.Errorf("keys %q and %q share Redis key %q", prev, k, rk)
		}
		seen[rk] = k
		tag := rk[strings.IndexByte(rk, '{')+1 : strings.IndexByte(rk, '}')]
		if strings.Count(rk, "{") != 1 || strings.Count(rk, "}") != 1 {
			t.Errorf("key for %q has extra braces: %q", k, rk)
		}
		if len(rk) > 200 {
			t.Errorf("key for a %d-byte user key is %d bytes", len(k), len(rk))
		}
		if plainKey(k) {
			if tag != "="+k {
				t.Errorf("tag for plain %q = %q", k, tag)
			}
		} else if len(tag) != 33 || tag[0] != '#' || strings.Trim(tag[1:], "0123456789abcdef") != "" {
			t.Errorf("tag for %q = %q, want # and 32 hex digits", k, tag)
		}
	}
	// Every Redis key is one the layout predicts, each lock next to its state.
	var keys []string
	for _, k := range x.m.Keys() {
		base := strings.TrimSuffix(k, ":x")
		if _, ok := seen[strings.Replace(base, ":g1/3600000000b1p3600000000", ":g30/60000000b16p1000000", 1)]; !ok {
			t.Errorf("unexpected key %q", k)
		}
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if want := len(seen) * 3; len(keys) != want {
		t.Errorf("%d keys, want %d", len(keys), want)
	}
	// All keys of one user share a Cluster hash slot; the tag is what the
	// slot is computed from.
	for _, k := range keys {
		if strings.Contains(k, "\n") || strings.Contains(k, "\x00") {
			t.Errorf("user bytes leaked into key %q", k)
		}
	}
}

// Exactly Rate requests pass however many goroutines race for them.
func TestMiniConcurrentExact(t *testing.T) {
	x := newMini(t)
	for _, l := range []store.Limit{
		{Algorithm: store.FixedWindow, Rate: 37, Period: time.Minute},
		{Algorithm: store.SlidingLog, Rate: 37, Period: time.Minute},
		{Algorithm: store.GCRA, Rate: 37, Period: time.Minute},
		{Algorithm: store.TokenBucket, Rate: 37, Period: time.Minute},
	} {
		var allowed atomic.Int64
		var wg sync.WaitGroup
		for g := 0; g < 8; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 10; i++ {
					r, err := x.store.Take(context.Background(), "race", 1, specs(l)...)
					if err != nil {
						t.Error(err)
						return
					}
					if r.Allowed {
						allowed.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		if got := allowed.Load(); got != 37 {
			t.Errorf("%v: %d of 80 allowed, want exactly 37", l, got)
		}
	}
}

func TestPrepareCacheBounded(t *testing.T) {
	x := newMini(t)
	for i := 1; i <= maxCachedLimits+50; i++ {
		x.take("k", 0, store.Limit{Algorithm: store.FixedWindow, Rate: int64(i), Period: time.Second})
	}
	if n := x.store.cache.Len(); n != maxCachedLimits {
		t.Errorf("cache holds %d, want %d", n, maxCachedLimits)
	}
}

// A fixed window's hash may outlive its window (its expiry is rounded up
// to a millisecond; a test clock may move without expiring keys): the
// count of an earlier window is never read, and the next window's first
// charge leaves one field. Here miniredis' clock moves with SetTime alone,
// so no key expires, through the lean script, the take script (a
// penalty) and a dry run.
func TestMiniFixedWindowOutlivedKey(t *testing.T) {
	x := newMini(t)
	lean := store.Limit{Algorithm: store.FixedWindow, Rate: 2, Period: 1500 * time.Microsecond}
	general := lean
	general.Penalty = time.Microsecond
	for _, l := range []store.Limit{lean, general} {
		x.take("k", 2, l)
		if r := x.take("k", 1, l); r.Allowed {
			t.Fatalf("%v: third unit allowed in one window", l)
		}
		x.now = x.now.Add(3 * time.Millisecond) // two windows on, no expiry
		x.m.SetTime(x.now)
		if r, err := x.store.Peek(context.Background(), "k", 2, specs(l)...); err != nil || !r.Allowed || r.Remaining != 0 {
			t.Errorf("%v: peek of 2 in a later window: %+v, %v; want allowed, Remaining 0", l, r, err)
		}
		if r := x.take("k", 1, l); !r.Allowed || r.Remaining != 1 {
			t.Errorf("%v: first take of a later window: %+v, want allowed, Remaining 1", l, r)
		}
		if v := x.fixedState("k", l); v != "1" {
			t.Errorf("%v: state %s, want one field holding 1", l, v)
		}
		x.now = x.now.Add(time.Second)
		x.m.SetTime(x.now)
		x.m.FastForward(time.Second)
	}
}
