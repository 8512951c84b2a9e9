package core

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/store"
)

// sharedStand is a memory store behind a type of its own, so that a
// Limiter treats it as a shared store (FailLocal with a fallback), as it
// does a Redis store, without a round trip in the measure.
type sharedStand struct{ m *memorystore.Store }

func (s sharedStand) Take(ctx context.Context, key string, n int64, limits ...store.Spec) (store.Result, error) {
	return s.m.Take(ctx, key, n, limits...)
}

// BenchmarkDecideShared measures Decide on a shared store that answers
// (the healthy path of a Redis store, less the round trip), over 1000
// keys: what the Limiter adds per request around the store's Take. Under
// FailLocal (the default) each Take also notes itself in the local
// fallback (begin, after: a lock of the key's shard and the answer
// remembered); FailOpen, which keeps no fallback, shows what that costs.
//
//	go test -run '^$' -bench DecideShared -benchmem ./core
func BenchmarkDecideShared(b *testing.B) {
	reqs := make([]*http.Request, 1000)
	for i := range reqs {
		reqs[i] = httptest.NewRequest(http.MethodGet, "/", nil)
		reqs[i].Header.Set("X-Client", "client-"+strconv.Itoa(i))
	}
	for _, p := range []FailurePolicy{FailLocal, FailOpen} {
		l, err := New(sharedStand{memorystore.New()},
			"bench", keyFromHeader, []store.Limit{store.PerHour(1_000_000_000)},
			WithFailurePolicy(p))
		if err != nil {
			b.Fatal(err)
		}
		b.Run("serial/"+p.String(), func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				l.Decide(reqs[i%len(reqs)])
			}
		})
		b.Run("parallel/"+p.String(), func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for i := 0; pb.Next(); i++ {
					l.Decide(reqs[i%len(reqs)])
				}
			})
		})
	}
}
