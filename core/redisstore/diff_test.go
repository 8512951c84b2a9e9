package redisstore

import (
	"context"
	"fmt"
	"math"
	"math/rand"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/internal/redistest"
)

// The Redis store and the memory store implement one contract,
// ALGORITHMS.md: random sequences of Takes must get identical Results,
// PerLimit included. diffPool mixes small limits, where every branch is
// hit often, with sizes near 2^53 that test the exactness of Lua's doubles.
var diffPool = []store.Limit{
	{Algorithm: store.GCRA, Rate: 3, Period: time.Second},
	{Algorithm: store.GCRA, Rate: 7, Period: 3 * time.Second, Burst: 2, Penalty: 2 * time.Second},
	{Algorithm: store.GCRA, Rate: 3, Period: 1000 * time.Hour, Burst: 7000}, // B·T ≈ 8.4e15
	{Algorithm: store.LeakyBucket, Rate: 4, Period: time.Second, Burst: 3},
	{Algorithm: store.LeakyBucket, Rate: 3, Period: time.Second, Penalty: 1500 * time.Millisecond},
	{Algorithm: store.TokenBucket, Rate: 7, Period: 3 * time.Second, Burst: 4},
	{Algorithm: store.TokenBucket, Rate: 2, Period: time.Second, Burst: 5, Penalty: time.Second},
	{Algorithm: store.TokenBucket, Rate: 2_000_001, Period: time.Hour, Burst: 2_400_000}, // cap ≈ 8.6e15
	{Algorithm: store.FixedWindow, Rate: 5, Period: 2 * time.Second},
	{Algorithm: store.FixedWindow, Rate: 3, Period: time.Second, Penalty: 3 * time.Second},
	{Algorithm: store.FixedWindow, Rate: 1 << 52, Period: 7 * time.Microsecond},
	{Algorithm: store.FixedWindow, Rate: 10_000_000, Period: 720 * time.Hour}, // (R+1)·P > 2^53: fixed.lua's two-integer reply
	{Algorithm: store.SlidingWindow, Rate: 6, Period: 2 * time.Second},
	{Algorithm: store.SlidingWindow, Rate: 3, Period: 700 * time.Millisecond, Penalty: time.Second},
	{Algorithm: store.SlidingWindow, Rate: 500_000_000, Period: 3_000_001 * time.Microsecond}, // R·P ≈ 1.5e15
	{Algorithm: store.SlidingLog, Rate: 4, Period: 1500 * time.Millisecond},
	{Algorithm: store.SlidingLog, Rate: 3, Period: time.Second, Penalty: 2 * time.Second},
	// Calendar windows: a day whose midnight (22:16:40 UTC) every run
	// crosses, and a week with a penalty.
	store.PerCalendar(4, "day", time.FixedZone("diff+014320", 6200)),
	calendarWithPenalty(store.PerCalendar(3, "week", time.UTC), 2*time.Second),
}

func calendarWithPenalty(l store.Limit, d time.Duration) store.Limit {
	l.Penalty = d
	return l
}

var (
	diffSteps = []time.Duration{0, 0, time.Microsecond, 999 * time.Microsecond, time.Millisecond,
		37 * time.Millisecond, 111 * time.Millisecond, 333 * time.Millisecond, 700 * time.Millisecond, 2 * time.Second}
	diffCosts = []int64{0, 1, 1, 1, 2, 3, 5, 1_000_000, 1 << 52, 1<<52 + 1, math.MaxInt64}
)

// diffRun plays steps random Takes of 1 to maxLimits limits on mem and on
// take, advancing the clock with advance, and fails at the first
// difference.
func diffRun(t *testing.T, steps, maxLimits int, mem store.Store, now func() time.Time, advance func(time.Duration),
	take func(key string, n int64, limits []store.Limit) (store.Result, error)) {
	t.Helper()
	seed := int64(1)
	if s := os.Getenv("SLUICE_DIFF_SEED"); s != "" {
		seed, _ = strconv.ParseInt(s, 10, 64)
	}
	rng := rand.New(rand.NewSource(seed))
	ctx := context.Background()
	for i := 0; i < steps; i++ {
		advance(diffSteps[rng.Intn(len(diffSteps))])
		key := fmt.Sprint("k", rng.Intn(2))
		limits := make([]store.Limit, 1+rng.Intn(maxLimits))
		for j := range limits {
			limits[j] = diffPool[rng.Intn(len(diffPool))]
		}
		n := diffCosts[rng.Intn(len(diffCosts))]
		want, err := mem.Take(ctx, key, n, specs(limits...)...)
		if err != nil {
			t.Fatal(err)
		}
		got, err := take(key, n, limits)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("seed %d step %d at %v: Take(%q, %d, %v):\nredis  %+v\nmemory %+v", seed, i, now().UnixMicro(), key, n, limits, got, want)
		}
	}
}

// On miniredis (gopher-lua), with TIME and TTLs under control; single
// limits, which take the script's fast paths, and up to three.
func TestMiniMatchesMemoryStore(t *testing.T) {
	redistest.Slow(t)
	for _, c := range []struct{ steps, maxLimits int }{{1500, 1}, {3000, 3}} {
		t.Run(fmt.Sprint("limits ", c.maxLimits), func(t *testing.T) { miniMatches(t, c.steps, c.maxLimits) })
	}
}

func miniMatches(t *testing.T, steps, maxLimits int) {
	x := newMini(t)
	x.store.wall = func() time.Time { return x.now }
	x.advance(123456789 * time.Microsecond) // off every window boundary
	mem := memorystore.New(memorystore.WithClock(func() time.Time { return x.now }))
	diffRun(t, steps, maxLimits, mem, func() time.Time { return x.now }, x.advance,
		func(key string, n int64, limits []store.Limit) (store.Result, error) {
			r, err := x.store.Take(context.Background(), key, n, specs(limits...)...)
			x.ttlsAll()
			return r, err
		})
}

// On a real redis-server (Lua 5.1). Its clock cannot be set, so each call
// runs the script with the TIME line replaced by the test's clock, EVAL'd.
// Keys would then expire by the server's clock, which runs faster than the
// test's whenever a step advances it by less than the real time a step
// takes (a 7 µs window gets the 1 ms minimum TTL, and a loaded machine
// takes longer than that between two Takes). So the script's TTLs get an
// hour added: no key lapses during the run, and every state past its
// nominal TTL must decide exactly like an absent one, which is the
// property the TTLs rely on (TTLs themselves are checked by storetest on
// miniredis, where the clock is the test's).
func TestRedisMatchesMemoryStore(t *testing.T) {
	for _, c := range []struct{ steps, maxLimits int }{{800, 1}, {1500, 3}} {
		t.Run(fmt.Sprint("limits ", c.maxLimits), func(t *testing.T) { redisMatches(t, c.steps, c.maxLimits) })
	}
}

func redisMatches(t *testing.T, steps, maxLimits int) {
	srv := redistest.StartServer(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	t.Cleanup(func() { _ = client.Close() })
	s := realStore(t, client)
	now := time.Unix(1_700_000_000, 987654_000).UTC()
	s.wall = func() time.Time { return now }
	mem := memorystore.New(memorystore.WithClock(func() time.Time { return now }))
	const clockLine = "local t = call('TIME')"
	if strings.Count(takeSource, clockLine) != 1 {
		t.Fatalf("script has no single %q line to replace", clockLine)
	}
	base := longerTTLs(t, takeSource)
	calls := 0
	diffRun(t, steps, maxLimits, mem, func() time.Time { return now }, func(d time.Duration) { now = now.Add(d) },
		func(key string, n int64, limits []store.Limit) (store.Result, error) {
			c, err := s.takeCall(key, n, specs(limits...), false)
			if err != nil {
				return store.Result{}, err
			}
			keys, args := c.keysArgs()
			us := now.UnixMicro()
			script := strings.Replace(base, clockLine,
				fmt.Sprintf("local t = {'%d', '%d'}", us/1_000_000, us%1_000_000), 1)
			if calls++; calls%500 == 0 {
				client.ScriptFlush(context.Background()) // every EVAL'd script stays cached
			}
			reply, err := client.Eval(context.Background(), script, keys, args...).Int64Slice()
			if err != nil {
				return store.Result{}, err
			}
			return decode(reply, n, c.limits)
		})
}

// A Take that a Cluster slot migration splits (TRYAGAIN) is decided one key
// at a time (split); played alone, that must decide exactly as the take
// script does: the same random sequences, every Take of several keys
// decided by split, against the memory store.
func TestMiniSplitMatchesMemoryStore(t *testing.T) {
	redistest.Slow(t)
	x := newMini(t)
	x.store.wall = func() time.Time { return x.now }
	x.advance(123456789 * time.Microsecond)
	mem := memorystore.New(memorystore.WithClock(func() time.Time { return x.now }))
	splits := 0
	diffRun(t, 3000, 3, mem, func() time.Time { return x.now }, x.advance,
		func(key string, n int64, limits []store.Limit) (store.Result, error) {
			ctx := context.Background()
			c, err := x.store.call(key, n, specs(limits...))
			if err != nil || !c.splits || len(c.limits) == 1 && c.limits[0].penalty == 0 {
				return x.store.Take(ctx, key, n, specs(limits...)...)
			}
			splits++
			v, _, err := x.store.splitOfSpecs(key, specs(limits...)).take(ctx, x.store, n)
			if err != nil {
				return store.Result{}, err
			}
			x.ttlsAll()
			return c.decodeInts(v, n)
		})
	if splits < 1000 {
		t.Fatalf("only %d of 3000 Takes were split", splits)
	}
}

// A split Take decides as the take script does, dry runs (negative n),
// peeks, penalty locks, duplicate limits and InFlight slots included (the
// InFlight limit's own call takes the slot, freed when another limit
// denies). Random Takes, Releases and clock moves on two keys, one decided
// by the script and one by split: every Result the same, slots included
// (miniredis' clock stands still within a step, and a slot is the clock),
// and every key keeps a TTL.
func TestMiniSplitMatchesScript(t *testing.T) {
	redistest.Slow(t)
	x := newMini(t)
	x.advance(123456789 * time.Microsecond)
	ctx := context.Background()
	pool := [][]store.Limit{
		{store.MaxInFlight(2, 10*time.Second), {Algorithm: store.FixedWindow, Rate: 3, Period: time.Second}},
		{{Algorithm: store.GCRA, Rate: 4, Period: time.Second, Penalty: 2 * time.Second}, store.MaxInFlight(3, time.Second)},
		{store.MaxInFlight(1, 5*time.Second), store.MaxInFlight(1, 5*time.Second), {Algorithm: store.SlidingLog, Rate: 2, Period: time.Second}},
		{{Algorithm: store.GCRA, Rate: 3, Period: time.Second, Penalty: 2 * time.Second}, {Algorithm: store.FixedWindow, Rate: 4, Period: time.Second, Penalty: time.Second}},
		{{Algorithm: store.SlidingLog, Rate: 3, Period: time.Second, Penalty: 700 * time.Millisecond}, store.MaxInFlight(2, 3*time.Second)},
		{{Algorithm: store.TokenBucket, Rate: 2, Period: time.Second, Burst: 3, Penalty: time.Second}, {Algorithm: store.SlidingWindow, Rate: 3, Period: time.Second},
			{Algorithm: store.TokenBucket, Rate: 2, Period: time.Second, Burst: 3, Penalty: time.Second}},
		{{Algorithm: store.LeakyBucket, Rate: 3, Period: time.Second, Burst: 1, Penalty: 500 * time.Millisecond}},
	}
	rng := rand.New(rand.NewSource(7))
	var held [][2]int64 // slots of allowed Takes: script's, split's
	var heldSet []int
	for step := range 4000 {
		x.advance(diffSteps[rng.Intn(len(diffSteps))] / 3)
		set := rng.Intn(len(pool))
		sp := specs(pool[set]...)
		if len(held) > 0 && rng.Intn(4) == 0 {
			if i := rng.Intn(len(held)); heldSet[i] == set {
				for j, key := range []string{"script", "split"} {
					if err := x.store.Release(ctx, key, held[i][j], sp...); err != nil {
						t.Fatal(err)
					}
				}
				held, heldSet = append(held[:i], held[i+1:]...), append(heldSet[:i], heldSet[i+1:]...)
			}
		}
		n := int64(rng.Intn(7) - 3)
		c, err := x.store.call("script", n, sp)
		if err != nil {
			t.Fatal(err)
		}
		want, _, err := x.store.runCall(ctx, c, n, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		if c, err = x.store.call("split", n, sp); err != nil || !c.splits {
			t.Fatalf("step %d: no split (%v)", step, err)
		}
		v, _, err := x.store.splitOfSpecs("split", sp).take(ctx, x.store, n)
		if err != nil {
			t.Fatal(err)
		}
		got, err := c.decodeInts(v, n)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("step %d, set %d, n %d:\nsplit  %+v\nscript %+v", step, set, n, got, want)
		}
		if got.Slot != 0 {
			held, heldSet = append(held, [2]int64{want.Slot, got.Slot}), append(heldSet, set)
		}
		x.ttlsAll()
	}
	if len(held) == 0 {
		t.Fatal("no slot held at the end: the run tested little")
	}
}
