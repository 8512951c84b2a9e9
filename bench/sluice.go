package main

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/core/store"
)

// sluiceLimit is q as a sluice Limit of algorithm alg (see quota).
// SlidingLog keeps one entry per admitted event, so its window is capped at
// 100_000 (still never reached in a case).
func sluiceLimit(alg store.Algorithm, q quota) store.Limit {
	switch alg {
	case store.GCRA, store.TokenBucket, store.LeakyBucket:
		return store.Limit{Algorithm: alg, Rate: q.rate, Period: q.period, Burst: q.burst}
	case store.SlidingLog:
		return store.Limit{Algorithm: alg, Rate: min(q.window, 100_000), Period: q.windowPeriod}
	default:
		return store.Limit{Algorithm: alg, Rate: q.window, Period: q.windowPeriod}
	}
}

// denyCachePrefix names the contenders with the deny cache on
// (redisstore.WithDenyCache(denyCacheSize)), the defaults otherwise.
const (
	denyCachePrefix = "sluice-redis+deny/"
	denyCacheSize   = 4096 // "4096 suits most services" (WithDenyCache)
)

// inFlight is the -inflight flag: the first value, when positive, replaces
// the Redis store's default pipelining (2) in the sluice-redis contenders; each further
// one adds contenders sluice-redis@<value>/<algorithm>, to compare
// settings within one run.
var inFlight = []int{0}

func sluiceImpls() []impl {
	var out []impl
	for i, n := range inFlight {
		prefix := "sluice-redis/"
		if i > 0 {
			prefix = fmt.Sprintf("sluice-redis@%d/", n)
		}
		for _, alg := range store.Algorithms() {
			out = append(out, impl{name: prefix + string(alg), group: "redis", sluice: true, timeAll: true, hot: leased(alg),
				build: func(rdb *redis.Client, q quota) (func() decideFunc, func(), error) {
					var opts []redisstore.Option
					if n > 0 {
						opts = append(opts, redisstore.WithPipelining(n))
					}
					st, err := redisstore.New(rdb, opts...)
					if err != nil {
						return nil, nil, err
					}
					return redisDecide(st, sluiceLimit(alg, q)), nop, nil
				}})
		}
	}
	// Two limits per Take, as README's quick start (a rate and a window,
	// both never reached): the take script, batched as the lean ones are.
	// Not an algorithm: the SUMMARY leaves it out (sluiceNames).
	out = append(out, impl{name: twoLimits, group: "redis", sluice: true, timeAll: true,
		build: func(rdb *redis.Client, q quota) (func() decideFunc, func(), error) {
			st, err := redisstore.New(rdb)
			if err != nil {
				return nil, nil, err
			}
			return redisDecide(st, sluiceLimit(store.GCRA, q), sluiceLimit(store.FixedWindow, q)), nop, nil
		}})
	// The defaults plus the deny cache (off by default since issue 10), at
	// the size WithDenyCache's documentation recommends: the deny path of
	// issue 4's target, answered in process. Allow and deny paths; the
	// SUMMARY reports the deny target for these and for the defaults.
	for _, alg := range store.Algorithms() {
		out = append(out, impl{name: denyCachePrefix + string(alg), group: "redis", sluice: true, timeAll: true,
			build: func(rdb *redis.Client, q quota) (func() decideFunc, func(), error) {
				st, err := redisstore.New(rdb, redisstore.WithDenyCache(denyCacheSize))
				if err != nil {
					return nil, nil, err
				}
				return redisDecide(st, sluiceLimit(alg, q)), func() { _ = st.Close() }, nil
			}})
	}
	// The same without automatic pipelining and without the deny cache:
	// one EVALSHA round trip per decision, as before issue 4.
	for _, alg := range store.Algorithms() {
		out = append(out, impl{name: "sluice-plain/" + string(alg), group: "redis", sluice: true, timeAll: true,
			build: func(rdb *redis.Client, q quota) (func() decideFunc, func(), error) {
				st, err := redisstore.New(rdb, redisstore.WithPipelining(0), redisstore.WithDenyCache(0))
				if err != nil {
					return nil, nil, err
				}
				return redisDecide(st, sluiceLimit(alg, q)), nop, nil
			}})
	}
	// Lease mode (issue 12): the hot path only, where every goroutine takes
	// one key; its exact counterpart is sluice-redis/<algorithm>.
	for _, alg := range store.Algorithms() {
		if !leased(alg) {
			continue
		}
		out = append(out, impl{name: "sluice-lease/" + string(alg), group: "redis", sluice: true, timeAll: true, hotOnly: true,
			build: func(rdb *redis.Client, q quota) (func() decideFunc, func(), error) {
				st, err := redisstore.New(rdb, redisstore.WithLeases(redisstore.LeaseConfig{}))
				if err != nil {
					return nil, nil, err
				}
				return redisDecide(st, sluiceLimit(alg, q)), func() { _ = st.Close() }, nil
			}})
	}
	for _, alg := range store.Algorithms() {
		out = append(out, impl{name: "sluice-mem/" + string(alg), group: "memory", sluice: true,
			build: func(_ *redis.Client, q quota) (func() decideFunc, func(), error) {
				return memDecide(memorystore.New(), sluiceLimit(alg, q)), nop, nil
			}})
	}
	return out
}

// leased reports whether lease mode (redisstore.WithLeases) decides Takes
// of alg: the others always take the exact path.
func leased(alg store.Algorithm) bool {
	switch alg {
	case store.GCRA, store.TokenBucket, store.FixedWindow, store.SlidingWindow:
		return true
	}
	return false
}

// memDecide and redisDecide call Take on the concrete store type, as an
// application holding a *memorystore.Store or a *redisstore.Store does.
func memDecide(st *memorystore.Store, lim store.Limit) func() decideFunc {
	sp, err := lim.Spec()
	if err != nil {
		panic(err) // the benchmark's limits are constants
	}
	return shared(func(ctx context.Context, key string) (bool, error) {
		res, err := st.Take(ctx, key, 1, sp)
		return res.Allowed, err
	})
}

func redisDecide(st *redisstore.Store, limits ...store.Limit) func() decideFunc {
	sp := make([]store.Spec, len(limits))
	for i, l := range limits {
		var err error
		if sp[i], err = l.Spec(); err != nil {
			panic(err) // the benchmark's limits are constants
		}
	}
	return shared(func(ctx context.Context, key string) (bool, error) {
		res, err := st.Take(ctx, key, 1, sp...)
		return res.Allowed, err
	})
}

// twoLimits names the contender of two limits per Take.
const twoLimits = "sluice-two/gcra+fixed_window"
