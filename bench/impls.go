package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"time"

	"github.com/go-chi/httprate"
	httprateredis "github.com/go-chi/httprate-redis"
	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	"github.com/sethvargo/go-limiter/memorystore"
	"github.com/throttled/throttled/v2"
	goredisstore "github.com/throttled/throttled/v2/store/goredisstore.v9"
	"github.com/ulule/limiter/v3"
	ulmemory "github.com/ulule/limiter/v3/drivers/store/memory"
	ulredis "github.com/ulule/limiter/v3/drivers/store/redis"
	"golang.org/x/time/rate"
)

// quota is what every implementation enforces in one case. Algorithms with
// a burst (GCRA, token and leaky buckets: redis_rate, throttled,
// x/time/rate, sluice's gcra, token_bucket, leaky_bucket) take rate per
// period with that burst; window algorithms (ulule, httprate, go-limiter,
// sluice's fixed_window, sliding_window, sliding_log) take window per
// windowPeriod.
type quota struct {
	rate   int64
	period time.Duration
	burst  int64

	window       int64
	windowPeriod time.Duration
}

// largest is the most any key can admit before it is denied.
func (q quota) largest() int64 { return max(q.burst, q.window) }

var (
	// allowQuota is never reached, and every key's state lives through the
	// whole case (as for a busy client), in memory and in Redis: a slow
	// rate (10/s, so a GCRA state outlives the gap between two calls on a
	// key) with a burst of 1,000,000, or 500,000 per hour (sluice's
	// sliding_window accepts at most 2^51 µs of rate × period). A case makes
	// at most a few tens of thousands of decisions per key.
	allowQuota = quota{rate: 10, period: time.Second, burst: 1_000_000, window: 500_000, windowPeriod: time.Hour}
	// denyQuota is exhausted by the prefill and cannot recover during a case.
	denyQuota = quota{rate: 10, period: time.Hour, burst: 10, window: 10, windowPeriod: time.Hour}
	// hotQuota is never reached by one key taken by every goroutine (the hot
	// path): a burst of 100,000,000, or 30,000,000 per minute (sluice's
	// sliding_window accepts at most 2^51 µs of rate × period).
	hotQuota = quota{rate: 10, period: time.Second, burst: 100_000_000, window: 30_000_000, windowPeriod: time.Minute}
)

func (q quota) String() string {
	return fmt.Sprintf("%d/%v burst %d or %d per %v", q.rate, q.period, q.burst, q.window, q.windowPeriod)
}

// decideFunc makes one decision for key (or, for a batch implementation,
// batch decisions) and reports whether it was allowed.
type decideFunc func(ctx context.Context, key string) (allowed bool, err error)

// impl is one contender. build returns a factory of per-goroutine deciders
// (most share everything; httprate needs a request and a writer of its own)
// and a cleanup.
type impl struct {
	name    string
	group   string // "redis" or "memory": ratios only compare within a group
	sluice  bool
	peer    bool // a peer library (baselines are neither sluice nor peer)
	batch   int  // decisions per call (pipeline baseline: 16)
	noDeny  bool // baselines: no deny path
	build   func(rdb *redis.Client, q quota) (newWorker func() decideFunc, cleanup func(), err error)
	timeAll bool // time every call (remote); otherwise 1 call in sampleEvery
	hot     bool // also runs on the hot path (one key)
	hotOnly bool // runs on the hot path only (lease mode)
}

// runsOn reports whether the contender runs on path.
func (im *impl) runsOn(path string) bool {
	switch {
	case path == "hot":
		return im.hot || im.hotOnly
	case im.hotOnly, path == "deny" && im.noDeny:
		return false
	}
	return true
}

func shared(f decideFunc) func() decideFunc { return func() decideFunc { return f } }

func nop() {}

func peerImpls() []impl {
	return []impl{
		{name: "redis_rate", group: "redis", peer: true, timeAll: true,
			build: func(rdb *redis.Client, q quota) (func() decideFunc, func(), error) {
				l := redis_rate.NewLimiter(rdb)
				lim := redis_rate.Limit{Rate: int(q.rate), Burst: int(q.burst), Period: q.period}
				return shared(func(ctx context.Context, key string) (bool, error) {
					res, err := l.Allow(ctx, key, lim)
					if err != nil {
						return false, err
					}
					return res.Allowed > 0, nil
				}), nop, nil
			}},
		{name: "ulule-redis", group: "redis", peer: true, timeAll: true,
			build: func(rdb *redis.Client, q quota) (func() decideFunc, func(), error) {
				st, err := ulredis.NewStoreWithOptions(rdb, limiter.StoreOptions{Prefix: "ulule"})
				if err != nil {
					return nil, nil, err
				}
				return ululeDecide(limiter.New(st, limiter.Rate{Period: q.windowPeriod, Limit: q.window})), nop, nil
			}},
		{name: "throttled", group: "redis", peer: true, timeAll: true,
			build: func(rdb *redis.Client, q quota) (func() decideFunc, func(), error) {
				st, err := goredisstore.NewCtx(rdb, "throttled:")
				if err != nil {
					return nil, nil, err
				}
				rl, err := throttled.NewGCRARateLimiterCtx(st, throttled.RateQuota{
					MaxRate:  throttled.PerDuration(int(q.rate), q.period),
					MaxBurst: int(q.burst) - 1, // throttled admits MaxBurst+1 at once
				})
				if err != nil {
					return nil, nil, err
				}
				return shared(func(ctx context.Context, key string) (bool, error) {
					limited, _, err := rl.RateLimitCtx(ctx, key, 1)
					return !limited, err
				}), nop, nil
			}},
		{name: "httprate-redis", group: "redis", peer: true, timeAll: true,
			build: func(rdb *redis.Client, q quota) (func() decideFunc, func(), error) {
				rl := httprate.NewRateLimiter(int(q.window), q.windowPeriod,
					httprateredis.WithRedisLimitCounter(&httprateredis.Config{
						Client: rdb, PrefixKey: "httprate", WindowLength: q.windowPeriod,
						// No silent switch to a local counter when Redis is slow:
						// the figures must be Redis's.
						FallbackDisabled: true,
					}))
				return httprateWorker(rl), nop, nil
			}},
		{name: "evalsha", group: "redis", timeAll: true, noDeny: true,
			build: func(rdb *redis.Client, q quota) (func() decideFunc, func(), error) {
				sha, err := rdb.ScriptLoad(context.Background(), "return 1").Result()
				if err != nil {
					return nil, nil, err
				}
				return shared(func(ctx context.Context, key string) (bool, error) {
					err := rdb.EvalSha(ctx, sha, []string{key}).Err()
					return err == nil, err
				}), nop, nil
			}},
		{name: "evalsha-pipe16", group: "redis", timeAll: true, noDeny: true, batch: 16,
			build: func(rdb *redis.Client, q quota) (func() decideFunc, func(), error) {
				sha, err := rdb.ScriptLoad(context.Background(), "return 1").Result()
				if err != nil {
					return nil, nil, err
				}
				return func() decideFunc {
					cmds := make([]*redis.Cmd, 16)
					return func(ctx context.Context, key string) (bool, error) {
						p := rdb.Pipeline()
						for i := range cmds {
							cmds[i] = p.EvalSha(ctx, sha, []string{key})
						}
						_, err := p.Exec(ctx)
						return err == nil, err
					}
				}, nop, nil
			}},
		{name: "ulule-memory", group: "memory", peer: true,
			build: func(_ *redis.Client, q quota) (func() decideFunc, func(), error) {
				st := ulmemory.NewStore()
				return ululeDecide(limiter.New(st, limiter.Rate{Period: q.windowPeriod, Limit: q.window})), nop, nil
			}},
		{name: "x/time/rate", group: "memory", peer: true,
			build: func(_ *redis.Client, q quota) (func() decideFunc, func(), error) {
				m := newXRateMap(q)
				return shared(func(_ context.Context, key string) (bool, error) {
					return m.allow(key), nil
				}), nop, nil
			}},
		{name: "go-limiter", group: "memory", peer: true,
			build: func(_ *redis.Client, q quota) (func() decideFunc, func(), error) {
				st, err := memorystore.New(&memorystore.Config{Tokens: uint64(q.window), Interval: q.windowPeriod})
				if err != nil {
					return nil, nil, err
				}
				return shared(func(ctx context.Context, key string) (bool, error) {
					_, _, _, ok, err := st.Take(ctx, key)
					return ok, err
				}), func() { st.Close(context.Background()) }, nil
			}},
	}
}

func ululeDecide(l *limiter.Limiter) func() decideFunc {
	return shared(func(ctx context.Context, key string) (bool, error) {
		c, err := l.Get(ctx, key)
		if err != nil {
			return false, err
		}
		return !c.Reached, nil
	})
}

// httprateWorker drives httprate the way its middleware does (OnLimit sets
// the response headers too), with a request and writer per goroutine.
func httprateWorker(rl *httprate.RateLimiter) func() decideFunc {
	return func() decideFunc {
		w := &resetWriter{h: make(http.Header, 8)}
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		return func(ctx context.Context, key string) (bool, error) {
			w.code = 0
			limited := rl.OnLimit(w, r, key)
			if w.code != 0 {
				return false, fmt.Errorf("httprate: status %d", w.code)
			}
			return !limited, nil
		}
	}
}

// xRateMap is the usual way to use x/time/rate per key: one Limiter per key
// in a sync.Map, created on first use.
type xRateMap struct {
	m     sync.Map
	limit rate.Limit
	burst int
}

func newXRateMap(q quota) *xRateMap {
	return &xRateMap{limit: rate.Limit(float64(q.rate) / q.period.Seconds()), burst: int(q.burst)}
}

func (x *xRateMap) allow(key string) bool {
	v, ok := x.m.Load(key)
	if !ok {
		v, _ = x.m.LoadOrStore(key, rate.NewLimiter(x.limit, x.burst))
	}
	return v.(*rate.Limiter).Allow()
}
