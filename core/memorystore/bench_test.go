package memorystore_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/internal/storekey"
)

// BenchmarkMemoryStoreTake measures Take on the wall clock: on one key (all
// callers contend for one shard) and on 65536 keys spread over the shards,
// serially and from GOMAXPROCS goroutines. The keys exist before timing
// starts, and every limit keeps its states alive (a state that expires
// between two visits would be reclaimed and inserted again), so every Take
// is the hot path of an existing key.
func BenchmarkMemoryStoreTake(b *testing.B) {
	ctx := context.Background()
	// One per second with a burst of a million: each Take adds 1s to the
	// key's TAT, so no key's state expires during the benchmark.
	gcra := store.Limit{Algorithm: store.GCRA, Rate: 1, Period: time.Second, Burst: 1_000_000}
	gcraSpec := specs(gcra)
	keys := make([]string, 1<<16)
	for i := range keys {
		keys[i] = "client-" + strconv.Itoa(i)
	}
	newStoreOf := func(b *testing.B, keys []string, limits ...store.Limit) *memorystore.Store {
		s := memorystore.New()
		for _, k := range keys {
			if _, err := s.Take(ctx, k, 1, specs(limits...)...); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportAllocs()
		b.ResetTimer()
		return s
	}
	newStore := func(b *testing.B, limits ...store.Limit) *memorystore.Store { return newStoreOf(b, keys, limits...) }
	serial := func(limits ...store.Limit) func(b *testing.B) {
		return func(b *testing.B) {
			s, sp := newStore(b, limits...), specs(limits...)
			for i := 0; i < b.N; i++ {
				_, _ = s.Take(ctx, keys[0], 1, sp...)
			}
		}
	}

	b.Run("serial/one-key", serial(gcra))
	b.Run("serial/many-keys", func(b *testing.B) {
		s := newStore(b, gcra)
		for i := 0; i < b.N; i++ {
			_, _ = s.Take(ctx, keys[i&(len(keys)-1)], 1, gcraSpec...)
		}
	})
	b.Run("parallel/one-key", func(b *testing.B) {
		s := newStore(b, gcra)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				_, _ = s.Take(ctx, keys[0], 1, gcraSpec...)
			}
		})
	})
	b.Run("parallel/many-keys", func(b *testing.B) {
		s := newStore(b, gcra)
		var worker atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			i := int(worker.Add(1)) * 7919
			for pb.Next() {
				_, _ = s.Take(ctx, keys[i&(len(keys)-1)], 1, gcraSpec...)
				i++
			}
		})
	})
	// As bench/ measures it (BenchmarkMemory there): 1000 keys in turn,
	// serial and from GOMAXPROCS goroutines, each limit never reached.
	for _, l := range []store.Limit{
		gcra,
		{Algorithm: store.SlidingLog, Rate: 100_000, Period: time.Hour},
	} {
		keys := keys[:1000]
		sp := specs(l)
		b.Run("serial/1000-keys/"+string(l.Algorithm), func(b *testing.B) {
			s := newStoreOf(b, keys, l)
			for i := 0; i < b.N; i++ {
				_, _ = s.Take(ctx, keys[i%len(keys)], 1, sp...)
			}
		})
		b.Run("parallel/1000-keys/"+string(l.Algorithm), func(b *testing.B) {
			s := newStoreOf(b, keys, l)
			var worker atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				i := int(worker.Add(97))
				for pb.Next() {
					_, _ = s.Take(ctx, keys[i%len(keys)], 1, sp...)
					i++
				}
			})
		})
	}
	for _, l := range []store.Limit{
		{Algorithm: store.LeakyBucket, Rate: 1_000_000, Period: time.Second},
		{Algorithm: store.TokenBucket, Rate: 1_000_000, Period: time.Second},
		{Algorithm: store.FixedWindow, Rate: 1_000_000, Period: time.Second},
		{Algorithm: store.SlidingWindow, Rate: 1_000_000, Period: time.Second},
		{Algorithm: store.SlidingLog, Rate: 1000, Period: time.Millisecond},
	} {
		b.Run("serial/one-key/"+string(l.Algorithm), serial(l))
	}
	// A flood of new keys through one Limiter on a full store shared with
	// another: every Take inserts a state and evicts one (the insertion
	// path, which allocates the new state).
	b.Run("serial/flood", func(b *testing.B) {
		s := memorystore.New(memorystore.WithMaxKeys(1 << 14))
		other := storekey.Prefix("login")
		for i := range 1 << 10 {
			_, _ = s.Take(ctx, other+strconv.Itoa(i), 1, gcraSpec...)
		}
		flood := storekey.Prefix("cheap")
		for i := range 1 << 14 {
			_, _ = s.Take(ctx, flood+strconv.Itoa(i), 1, gcraSpec...)
		}
		fresh := make([]string, 1<<16)
		for i := range fresh {
			fresh[i] = flood + "new-" + strconv.Itoa(i)
		}
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			_, _ = s.Take(ctx, fresh[i&(len(fresh)-1)], 1, gcraSpec...)
		}
	})
	b.Run("serial/one-key/three-limits", serial(
		gcra, store.Limit{Algorithm: store.FixedWindow, Rate: 1 << 40, Period: time.Minute}, store.Limit{Algorithm: store.TokenBucket, Rate: 1000, Period: time.Second, Burst: 1_000_000_000},
	))
}
