package memorystore_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/store"
)

func ExampleStore() {
	// A fake clock makes the output reproducible; omit WithClock to
	// use time.Now.
	now := time.Unix(1_700_000_000, 0)
	mem := memorystore.New(memorystore.WithClock(func() time.Time { return now }))

	// Two requests per second, in a burst of at most two. A store takes
	// the validated form of a limit, its Spec.
	limit, err := store.PerSecond(2).Spec()
	if err != nil {
		panic(err)
	}
	for i := 0; i < 3; i++ {
		res, err := mem.Take(context.Background(), "client-42", 1, limit)
		if err != nil {
			fmt.Println("error:", err)
			return
		}
		fmt.Printf("allowed=%v remaining=%d retry=%v\n", res.Allowed, res.Remaining, res.RetryAfter)
	}
	now = now.Add(500 * time.Millisecond)
	res, _ := mem.Take(context.Background(), "client-42", 1, limit)
	fmt.Printf("500ms later: allowed=%v remaining=%d\n", res.Allowed, res.Remaining)
	// Output:
	// allowed=true remaining=1 retry=0s
	// allowed=true remaining=0 retry=0s
	// allowed=false remaining=0 retry=500ms
	// 500ms later: allowed=true remaining=0
}

func ExampleStore_Take_severalLimits() {
	now := time.Unix(1_700_000_000, 0)
	mem := memorystore.New(memorystore.WithClock(func() time.Time { return now }))

	// At most 3 per second and 100 per hour: a Take is charged against both
	// or, when either denies, against neither.
	perSecond, _ := store.Limit{Algorithm: store.FixedWindow, Rate: 3, Period: time.Second}.Spec()
	perHour, _ := store.Limit{Algorithm: store.SlidingLog, Rate: 100, Period: time.Hour}.Spec()
	for i := 0; i < 4; i++ {
		res, _ := mem.Take(context.Background(), "client-42", 1, perSecond, perHour)
		fmt.Printf("allowed=%v binding=%d hourly remaining=%d\n",
			res.Allowed, res.Binding, res.PerLimit[1].Remaining)
	}
	// Output:
	// allowed=true binding=0 hourly remaining=99
	// allowed=true binding=0 hourly remaining=98
	// allowed=true binding=0 hourly remaining=97
	// allowed=false binding=0 hourly remaining=97
}

// A peek (cost 0) reports the state without charging anything.
func ExampleStore_Take_peek() {
	now := time.Unix(1_700_000_000, 0)
	mem := memorystore.New(memorystore.WithClock(func() time.Time { return now }))
	limit, _ := store.Limit{Algorithm: store.SlidingLog, Rate: 3, Period: time.Minute}.Spec()
	ctx := context.Background()
	_, _ = mem.Take(ctx, "alice", 1, limit)
	for i := 0; i < 2; i++ {
		res, _ := mem.Take(ctx, "alice", 0, limit)
		fmt.Println(res.Allowed, res.Remaining)
	}
	// Output:
	// true 2
	// true 2
}

// The memory store holds a bounded number of states; a flood of new keys
// evicts the least valuable ones rather than growing without bound.
func ExampleWithMaxKeys() {
	mem := memorystore.New(memorystore.WithMaxKeys(1000))
	limit, err := store.PerMinute(10).Spec()
	if err != nil {
		panic(err)
	}
	for i := 0; i < 5000; i++ {
		if _, err := mem.Take(context.Background(), fmt.Sprint("client-", i), 1, limit); err != nil {
			panic(err)
		}
	}
	// The store holds at most 1000 states: the first clients' went to make
	// room, so client-0 starts afresh.
	res, err := mem.Take(context.Background(), "client-0", 1, limit)
	if err != nil {
		panic(err)
	}
	fmt.Println(res.Remaining)
	// Output:
	// 9
}
