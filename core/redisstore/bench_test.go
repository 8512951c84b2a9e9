package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/internal/redistest"
)

// BenchmarkTake measures Takes on a real redis-server, as the bench module
// runs them (1000 keys, allow path): one goroutine (the round trip), and 32
// per GOMAXPROCS sharing pipelines; on bare Stores, and (gcra_defaults) on
// one with New's defaults, the fallback's timeout included. allocs/op and
// cpu-ns/op (the parallel cases' CPU per Take) are this process's, not
// redis-server's; ns/op of the parallel cases is Redis-bound.
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
	gcra := store.Limit{Algorithm: store.GCRA, Rate: 10, Period: time.Second, Burst: 1_000_000}
	for _, c := range []struct {
		name     string
		limits   []store.Limit
		defaults bool // New's defaults, as the bench module runs: the fallback, each call under the 100 ms timeout
	}{
		{"gcra", []store.Limit{gcra}, false},
		{"gcra_defaults", []store.Limit{gcra}, true},
		{"fixed_window", []store.Limit{{Algorithm: store.FixedWindow, Rate: 500_000, Period: time.Hour}}, false},
		{"two_limits", []store.Limit{gcra, {Algorithm: store.FixedWindow, Rate: 500_000, Period: time.Hour}}, false},
	} {
		s := realStore(b, client)
		if c.defaults {
			var err error
			if s, err = New(client); err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = s.Close() })
		}
		ctx := context.Background()
		sp := specs(c.limits...)
		b.Run(c.name+"/serial", func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if _, err := s.Take(ctx, keys[i%len(keys)], 1, sp...); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(c.name+"/parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.SetParallelism(32)
			cpu0 := processCPU()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					if _, err := s.Take(ctx, keys[i%len(keys)], 1, sp...); err != nil {
						b.Error(err)
						return
					}
					i += 7
				}
			})
			if cpu := processCPU() - cpu0; cpu > 0 {
				b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
			}
		})
	}
}

// BenchmarkLeaseHot measures one hot key taken by 32 goroutines per
// GOMAXPROCS (64 on the bench's 2 vCPUs), as the bench module's hot path
// at c=64 does: lease mode against the exact path, on a real redis-server.
// calls/op is lease script calls per decision (lease mode); cpu-ns/op is
// this process's CPU per decision (user and system; redis-server's is not
// counted). Lease mode on one key is bound by the refill's round trip
// (one lease of at most 64 units per round trip), so ns/op moves little
// with the client's CPU; cpu-ns/op shows what a Take costs the process.
//
//	go test -run '^$' -bench LeaseHot -benchmem ./core/redisstore
func BenchmarkLeaseHot(b *testing.B) {
	srv := redistest.StartServer(b)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	b.Cleanup(func() { _ = client.Close() })
	for _, lim := range []store.Limit{
		{Algorithm: store.GCRA, Rate: 10, Period: time.Second, Burst: 100_000_000},
		{Algorithm: store.FixedWindow, Rate: 30_000_000, Period: time.Minute},
	} {
		for _, mode := range []string{"lease", "exact"} {
			b.Run(string(lim.Algorithm)+"/"+mode, func(b *testing.B) {
				var opts []Option
				if mode == "lease" {
					opts = append(opts, WithLeases(LeaseConfig{}))
				}
				s := realStore(b, client, opts...)
				if s.lease != nil {
					waitLive(b, s)
				}
				ctx := context.Background()
				calls0 := int64(0)
				if s.lease != nil {
					calls0 = s.lease.calls.Load()
				}
				b.ReportAllocs()
				b.SetParallelism(32)
				b.ResetTimer()
				cpu0 := processCPU()
				sp := specs(lim)
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if _, err := s.Take(ctx, "hot", 1, sp...); err != nil {
							b.Error(err)
							return
						}
					}
				})
				b.StopTimer()
				if cpu := processCPU() - cpu0; cpu > 0 {
					b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
				}
				if s.lease != nil {
					b.ReportMetric(float64(s.lease.calls.Load()-calls0)/float64(b.N), "calls/op")
				}
			})
		}
	}
}

// BenchmarkTakeOverhead measures what a Store adds to one round trip at
// c=1: a serial Take of one GCRA limit (the lean script) through a Store
// with pipelining off (plain) and with its defaults (piped), against
// client.Do of the very EVALSHA command that the Store builds (raw), on a
// real redis-server. The round trip dominates ns/op; cpu-ns/op is this
// process's CPU per Take (redis-server's is not counted).
//
//	go test -run '^$' -bench TakeOverhead -benchmem ./core/redisstore
func BenchmarkTakeOverhead(b *testing.B) {
	srv := redistest.StartServer(b)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	b.Cleanup(func() { _ = client.Close() })
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = "k" + strconv.Itoa(i)
	}
	lim := []store.Limit{{Algorithm: store.GCRA, Rate: 10, Period: time.Second, Burst: 1_000_000}}
	ctx := context.Background()
	plain := realStore(b, client, WithPipelining(0))
	if err := plain.Ping(ctx); err != nil { // loads the scripts for raw
		b.Fatal(err)
	}
	cmds := make([][]any, len(keys))
	for i, k := range keys {
		c, err := plain.call(k, 1, specs(lim...))
		if err != nil {
			b.Fatal(err)
		}
		cmds[i] = c.cmd
	}
	measure := func(b *testing.B, take func(i int) error) {
		b.ReportAllocs()
		cpu0 := processCPU()
		for i := 0; i < b.N; i++ {
			if err := take(i % len(keys)); err != nil {
				b.Fatal(err)
			}
		}
		if cpu := processCPU() - cpu0; cpu > 0 {
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
		}
	}
	b.Run("raw", func(b *testing.B) {
		measure(b, func(i int) error { return client.Do(ctx, cmds[i]...).Err() })
	})
	for _, c := range []struct {
		name string
		s    *Store
	}{{"plain", plain}, {"piped", realStore(b, client)}} {
		sp := specs(lim...)
		b.Run(c.name, func(b *testing.B) {
			measure(b, func(i int) error {
				_, err := c.s.Take(ctx, keys[i], 1, sp...)
				return err
			})
		})
	}
}

// BenchmarkRecordedTake measures what recording a charge costs Redis (see
// record.go): the same Takes (1000 keys, allow path, one goroutine) sent
// to the plain scripts, as a healthy server gets them, and to their
// recorded twins, as a server gets them for 10 s after an uncertain
// outcome. redis-µs/op is the scripts' time inside Redis per call
// (INFO commandstats, evalsha), the figure to compare.
//
//	go test -run '^$' -bench RecordedTake ./core/redisstore
func BenchmarkRecordedTake(b *testing.B) {
	srv := redistest.StartServer(b)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	b.Cleanup(func() { _ = client.Close() })
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = "k" + strconv.Itoa(i)
	}
	ctx := context.Background()
	for _, lim := range []store.Limit{
		{Algorithm: store.GCRA, Rate: 10, Period: time.Second, Burst: 1_000_000},
		{Algorithm: store.FixedWindow, Rate: 500_000, Period: time.Hour},
	} {
		for _, recorded := range []bool{false, true} {
			b.Run(fmt.Sprintf("%s/recorded=%t", lim.Algorithm, recorded), func(b *testing.B) {
				s := realStore(b, client)
				sp := specs(lim)
				takeOK(b, s, "warm", 1, lim) // loads the scripts
				if err := client.ConfigResetStat(ctx).Err(); err != nil {
					b.Fatal(err)
				}
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					key := keys[i%len(keys)]
					if recorded {
						s.health.nodeFor(ctx, key).arm()
					}
					if _, err := s.takeRedis(ctx, key, 1, sp...); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				info, err := client.Info(ctx, "commandstats").Result()
				if err != nil {
					b.Fatal(err)
				}
				calls, usec := evalshaStats(b, info)
				if calls < int64(b.N) {
					b.Fatalf("Redis counted %d evalsha calls for %d Takes", calls, b.N)
				}
				b.ReportMetric(float64(usec)/float64(calls), "redis-µs/op")
			})
		}
	}
}

// evalshaStats returns the calls and microseconds of evalsha in info, the
// reply of INFO commandstats.
func evalshaStats(tb testing.TB, info string) (calls, usec int64) {
	for _, line := range strings.Split(info, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_evalsha:")
		if !ok {
			continue
		}
		for _, f := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(f, "=")
			n, _ := strconv.ParseInt(v, 10, 64)
			switch k {
			case "calls":
				calls = n
			case "usec":
				usec = n
			}
		}
		return calls, usec
	}
	tb.Fatal("no evalsha in INFO commandstats")
	return 0, 0
}
