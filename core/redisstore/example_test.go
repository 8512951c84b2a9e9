package redisstore_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/redisstore"
)

func ExampleNew() {
	// An in-process Redis for the example; any redis.UniversalClient works.
	mr, err := miniredis.Run()
	if err != nil {
		log.Fatal(err)
	}
	defer mr.Close()
	mr.SetTime(time.Unix(1_700_000_000, 0)) // freeze the server's clock so the output is exact

	// MaxRetries -1: a timed-out Take is not re-sent (and charged twice);
	// ContextTimeoutEnabled: the context's deadline bounds the wait.
	client := redis.NewClient(&redis.Options{Addr: mr.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true})
	defer client.Close()

	store, err := redisstore.New(client, redisstore.WithPrefix("myapp:rl:"))
	if err != nil {
		log.Fatal(err)
	}
	// redis-cell's example: a burst of 16, then 30 per minute.
	limit := core.Limit{Algorithm: core.GCRA, Rate: 30, Period: time.Minute, Burst: 16}
	ctx := context.Background()
	for i := 1; i <= 17; i++ {
		res, err := store.Take(ctx, "user:42", 1, limit)
		if err != nil {
			log.Fatal(err)
		}
		if i == 1 || i >= 16 {
			fmt.Printf("request %d: allowed=%v remaining=%d retry=%v reset=%v\n",
				i, res.Allowed, res.Remaining, res.RetryAfter, res.ResetAfter)
		}
	}
	fmt.Println(mr.Keys())
	// Output:
	// request 1: allowed=true remaining=15 retry=0s reset=2s
	// request 16: allowed=true remaining=0 retry=0s reset=32s
	// request 17: allowed=false remaining=0 retry=2s reset=32s
	// [myapp:rl:{=user:42}:g30/60000000b16p0]
}
