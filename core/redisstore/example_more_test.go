package redisstore_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/core/store"
)

// Several limits in one Take are decided in one script run: either every
// limit admits and all are charged, or none is. Every key gets a TTL.
func ExampleStore_Take() {
	mr, err := miniredis.Run()
	if err != nil {
		log.Fatal(err)
	}
	defer mr.Close()
	mr.SetTime(time.Unix(1_700_000_000, 0))
	client := redis.NewClient(&redis.Options{Addr: mr.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true})
	defer client.Close()
	// A roomy deadline (the default is 100 ms), so that the output does not
	// depend on how busy the machine running the example is.
	st, err := redisstore.New(client, redisstore.WithTimeout(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()

	perSecond := store.Limit{Algorithm: store.TokenBucket, Rate: 2, Period: time.Second}
	perHour := store.Limit{Algorithm: store.FixedWindow, Rate: 100, Period: time.Hour}
	for i := 0; i < 3; i++ {
		res, err := st.Take(context.Background(), "user:42", 1, specs(perSecond, perHour)...)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("allowed=%v binding=%d hourly remaining=%d\n", res.Allowed, res.Binding, res.PerLimit[1].Remaining)
	}
	for _, k := range mr.Keys() {
		fmt.Println(k, mr.TTL(k))
	}
	// Output:
	// allowed=true binding=0 hourly remaining=99
	// allowed=true binding=0 hourly remaining=98
	// allowed=false binding=0 hourly remaining=98
	// sluice:{=user:42}:f100/3600000000b0p0:h 46m40s
	// sluice:{=user:42}:t2/1000000b2p0 1s
}

// The Store behind a Limiter: every instance of a service given the same
// Redis, limiter name and limits shares one allowance per client.
func ExampleStore_withLimiter() {
	mr, err := miniredis.Run()
	if err != nil {
		log.Fatal(err)
	}
	defer mr.Close()
	mr.SetTime(time.Unix(1_700_000_000, 0)) // freeze the server's clock so the output is exact
	client := redis.NewClient(&redis.Options{Addr: mr.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true})
	defer client.Close()
	// The deadline is generous (the default is 100 ms) so that the
	// example's output does not depend on how busy the machine is.
	st, err := redisstore.New(client, redisstore.WithTimeout(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	byClient := func(r *http.Request) (string, error) { return r.Header.Get("X-Client"), nil }

	// Two instances of the service, one Redis: Limiters of one name share
	// their state (here both are in one process on one Store).
	var instances []*core.Limiter
	for i := 0; i < 2; i++ {
		l, err := core.New(st,
			"api", byClient, []store.Limit{store.PerMinute(3)})
		if err != nil {
			log.Fatal(err)
		}
		instances = append(instances, l)
	}
	for i := 0; i < 4; i++ {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.Header.Set("X-Client", "alice")
		d := instances[i%2].Decide(r)
		fmt.Printf("instance %d: %s remaining=%d\n", i%2, d.Outcome, d.Result.Remaining)
	}
	// Output:
	// instance 0: allowed remaining=2
	// instance 1: allowed remaining=1
	// instance 0: allowed remaining=0
	// instance 1: denied remaining=0
}

func ExampleWithPrefix() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:0"}) // New does not connect
	defer client.Close()
	for _, prefix := range []string{"billing:rl:", "bad{prefix}:", ""} {
		st, err := redisstore.New(client, redisstore.WithPrefix(prefix))
		fmt.Printf("%q %v\n", prefix, err)
		if err == nil {
			st.Close() // stops its subscription
		}
	}
	// Output:
	// "billing:rl:" <nil>
	// "bad{prefix}:" redisstore: invalid key prefix "bad{prefix}:": braces would choose the Redis Cluster slot
	// "" redisstore: invalid key prefix: empty
}
