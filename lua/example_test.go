package lua_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/lua"
)

// Running the take script by hand: one GCRA limit of 30 per minute with a
// burst of 16 (T = 2 s), a cost of 1. The reply is allowed, limit,
// remaining, retry, reset and delay, in microseconds.
func Example() {
	mr, err := miniredis.Run()
	if err != nil {
		log.Fatal(err)
	}
	defer mr.Close()
	mr.SetTime(time.Unix(1_700_000_000, 0))
	client := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer client.Close()

	script := redis.NewScript(lua.Take)
	keys := []string{"app:{=user:42}:g30/60000000b16p0", "app:{=user:42}:g30/60000000b16p0:x"}
	args := []any{"1", lua.CodeGCRA, "30", "60000000", "16", "2000000", "0"}
	for i := 0; i < 2; i++ {
		reply, err := script.Run(context.Background(), client, keys, args...).Int64Slice()
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(reply)
	}
	v, _ := mr.Get(keys[0])
	fmt.Println("tat:", v, "ttl:", mr.TTL(keys[0]))
	// Output:
	// [1 16 15 0 2000000 0]
	// [1 16 14 0 4000000 0]
	// tat: 1700000004000000 ttl: 4s
}
