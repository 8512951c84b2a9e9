package store_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/store"
)

// Every algorithm, 4 per second, offered six requests at once: GCRA,
// TokenBucket and the window algorithms admit four; LeakyBucket admits five
// (one in service, a queue of Burst = 4) and holds each until its turn.
func ExampleAlgorithms() {
	now := time.Unix(1_700_000_001, 0)
	mem := memorystore.New(memorystore.WithClock(func() time.Time { return now }))
	for _, alg := range store.Algorithms() {
		limit, err := store.Limit{Algorithm: alg, Rate: 4, Period: time.Second}.Spec()
		if err != nil {
			panic(err)
		}
		fmt.Printf("%-15s", alg)
		for i := 0; i < 6; i++ {
			res, err := mem.Take(context.Background(), "k", 1, limit)
			if err != nil {
				panic(err)
			}
			switch {
			case !res.Allowed:
				fmt.Print(" denied")
			case res.Delay > 0:
				fmt.Print(" held ", res.Delay)
			default:
				fmt.Print(" ok")
			}
		}
		fmt.Println()
	}
	// Output:
	// gcra            ok ok ok ok denied denied
	// token_bucket    ok ok ok ok denied denied
	// fixed_window    ok ok ok ok denied denied
	// sliding_window  ok ok ok ok denied denied
	// sliding_log     ok ok ok ok denied denied
	// leaky_bucket    ok held 250ms held 500ms held 750ms held 1s denied
}

func ExampleLimit_Spec_invalid() {
	for _, l := range []store.Limit{
		{Algorithm: store.TokenBucket, Rate: 100, Period: time.Minute, Burst: 10},
		{Rate: 0, Period: time.Second},
		{Algorithm: store.FixedWindow, Rate: 10, Period: time.Second, Burst: 5},
		{Algorithm: "fixed", Rate: 10, Period: time.Second},
	} {
		_, err := l.Spec()
		fmt.Println(err == nil, errors.Is(err, store.ErrInvalidLimit))
	}
	// Output:
	// true false
	// false true
	// false true
	// false true
}

// A penalty locks a client out for a while after a denial; requests during
// the lock are denied without being counted.
func ExampleLimit_penalty() {
	now := time.Unix(1_700_000_000, 0)
	mem := memorystore.New(memorystore.WithClock(func() time.Time { return now }))
	login, err := store.Limit{Algorithm: store.SlidingLog, Rate: 3, Period: time.Minute, Penalty: 15 * time.Minute}.Spec()
	if err != nil {
		panic(err)
	}
	for i := 1; i <= 4; i++ {
		res, _ := mem.Take(context.Background(), "alice", 1, login)
		fmt.Printf("attempt %d: allowed=%v retry=%v\n", i, res.Allowed, res.RetryAfter)
	}
	now = now.Add(time.Minute) // the sliding log alone would admit again
	res, _ := mem.Take(context.Background(), "alice", 1, login)
	fmt.Printf("a minute later: allowed=%v retry=%v\n", res.Allowed, res.RetryAfter)
	// Output:
	// attempt 1: allowed=true retry=0s
	// attempt 2: allowed=true retry=0s
	// attempt 3: allowed=true retry=0s
	// attempt 4: allowed=false retry=15m0s
	// a minute later: allowed=false retry=14m0s
}

func ExampleLimit_Spec() {
	spec, err := store.Limit{Algorithm: store.GCRA, Rate: 30, Period: time.Minute, Burst: 16}.Spec()
	if err != nil {
		panic(err)
	}
	fmt.Printf("rate=%d period=%dµs burst=%d interval=%dµs\n", spec.Rate(), spec.Period(), spec.Burst(), spec.Interval())

	// Defaults are applied: Burst 0 means Rate.
	spec, _ = store.PerSecond(5).Spec()
	fmt.Println(spec.Burst(), spec.Interval())
	// Output:
	// rate=30 period=60000000µs burst=16 interval=2000000µs
	// 5 200000
}

func ExamplePerMinute() {
	for _, l := range []store.Limit{store.PerSecond(10), store.PerMinute(100), store.PerHour(5000)} {
		fmt.Printf("%q rate=%d period=%v burst=%d\n", l.Algorithm, l.Rate, l.Period, l.Burst)
	}
	// Output:
	// "gcra" rate=10 period=1s burst=10
	// "gcra" rate=100 period=1m0s burst=100
	// "gcra" rate=5000 period=1h0m0s burst=5000
}
