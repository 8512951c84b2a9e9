package redisstore_test

import (
	"context"
	"fmt"
	"log"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/core/store"
)

func ExampleNew() {
	// An in-process Redis for the example; any redis.UniversalClient works.
	mr, err := miniredis.Run()
	if err != nil {
		log.Fatal(err)
	}
	defer mr.Close()
	mr.SetTime(time.Unix(1_700_000_000, 0)) // freeze the server's clock so the output is exact

	// MaxRetries -1: no retries, which Redis would refuse unrun anyway;
	// ContextTimeoutEnabled: the context's deadline bounds the wait.
	client := redis.NewClient(&redis.Options{Addr: mr.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true})
	defer client.Close()

	// A roomy deadline (the default is 100 ms), so that the output does not
	// depend on how busy the machine running the example is.
	st, err := redisstore.New(client, redisstore.WithPrefix("myapp:rl:"), redisstore.WithTimeout(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	// redis-cell's example: a burst of 16, then 30 per minute.
	limit := store.Limit{Algorithm: store.GCRA, Rate: 30, Period: time.Minute, Burst: 16}
	ctx := context.Background()
	for i := 1; i <= 17; i++ {
		res, err := st.Take(ctx, "user:42", 1, specs(limit)...)
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

func ExampleWithDenyCache() {
	mr, err := miniredis.Run()
	if err != nil {
		log.Fatal(err)
	}
	defer mr.Close()
	client := redis.NewClient(&redis.Options{Addr: mr.Addr(), MaxRetries: -1})
	defer client.Close()
	calls := &scriptCalls{}
	client.AddHook(calls) // counts the script calls the store sends

	// The cache is off by default (0); 4096 entries suit most services.
	st, err := redisstore.New(client, redisstore.WithDenyCache(4096), redisstore.WithTimeout(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	if err := st.Ping(ctx); err != nil { // ready: the cache answers from now on
		log.Fatal(err)
	}
	limit := store.PerHour(1)
	st.Take(ctx, "client:7", 1, specs(limit)...) // allowed
	res, _ := st.Take(ctx, "client:7", 1, specs(limit)...)
	fmt.Println("denied for about", res.RetryAfter.Round(time.Minute))

	// Identical Takes are now answered in process until the denial ends.
	before := calls.n.Load()
	for i := 0; i < 1000; i++ {
		if res, _ := st.Take(ctx, "client:7", 1, specs(limit)...); res.Allowed {
			fmt.Println("allowed?")
		}
	}
	fmt.Println("script calls for 1000 more denials:", calls.n.Load()-before)
	// Output:
	// denied for about 1h0m0s
	// script calls for 1000 more denials: 0
}

// scriptCalls is a go-redis hook that counts EVALSHA and EVAL commands
// (the store's decisions), leaving out the store's background commands.
type scriptCalls struct{ n atomic.Int64 }

func (h *scriptCalls) count(cmd redis.Cmder) {
	if name := cmd.Name(); name == "evalsha" || name == "eval" {
		h.n.Add(1)
	}
}

func (h *scriptCalls) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *scriptCalls) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.count(cmd)
		return next(ctx, cmd)
	}
}

func (h *scriptCalls) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			h.count(cmd)
		}
		return next(ctx, cmds)
	}
}

func ExampleWithPipelining() {
	mr, err := miniredis.Run()
	if err != nil {
		log.Fatal(err)
	}
	defer mr.Close()
	client := redis.NewClient(&redis.Options{Addr: mr.Addr(), MaxRetries: -1})
	defer client.Close()

	// At most 2 round trips in flight; concurrent Takes beyond that share
	// pipelines. Every Take is still decided on its own, atomically.
	st, err := redisstore.New(client, redisstore.WithPipelining(2), redisstore.WithTimeout(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	limit := store.Limit{Algorithm: store.FixedWindow, Rate: 50, Period: time.Hour}
	var wg sync.WaitGroup
	var admitted atomic.Int64
	for g := 0; g < 100; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := st.Take(context.Background(), "api", 1, specs(limit)...)
			if err == nil && res.Allowed {
				admitted.Add(1)
			}
		}()
	}
	wg.Wait()
	fmt.Println("admitted", admitted.Load(), "of 100")
	// Output:
	// admitted 50 of 100
}
