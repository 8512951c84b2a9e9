package redisstore

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/redistest"
)

// BenchmarkTake measures Takes on a real redis-server, as the bench module
// runs them (1000 keys, allow path): one goroutine (the round trip), and 32
// per GOMAXPROCS sharing pipelines. allocs/op is this process's; ns/op of
// the parallel cases is Redis-bound, see the bench module for CPU figures.
//
//	go test -run '^$' -bench Take -benchmem ./core/redisstore
func BenchmarkTake(b *testing.B) {
	srv := redistest.StartServer(b)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	b.Cleanup(func() { _ = client.Close() })
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = "k" + strconv.Itoa(i)
	}
	for _, c := range []struct {
		name   string
		limits []core.Limit
	}{
		{"gcra", []core.Limit{{Algorithm: core.GCRA, Rate: 10, Period: time.Second, Burst: 1_000_000}}},
		{"fixed_window", []core.Limit{{Algorithm: core.FixedWindow, Rate: 500_000, Period: time.Hour}}},
		{"two_limits", []core.Limit{
			{Algorithm: core.GCRA, Rate: 10, Period: time.Second, Burst: 1_000_000},
			{Algorithm: core.FixedWindow, Rate: 500_000, Period: time.Hour},
		}},
	} {
		s := realStore(b, client)
		ctx := context.Background()
		b.Run(c.name+"/serial", func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if _, err := s.Take(ctx, keys[i%len(keys)], 1, c.limits...); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(c.name+"/parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.SetParallelism(32)
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					if _, err := s.Take(ctx, keys[i%len(keys)], 1, c.limits...); err != nil {
						b.Error(err)
						return
					}
					i += 7
				}
			})
		})
	}
}
