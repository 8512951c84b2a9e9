package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// sampleEvery: in-process implementations time one call in this many, so
// that reading the clock does not dominate what is measured.
const sampleEvery = 64

// caseResult is what one (implementation, path, concurrency) case measured.
type caseResult struct {
	im        *impl
	path      string
	conc      int
	decisions int64
	allowed   int64
	errors    int64
	firstErr  error
	elapsed   time.Duration
	p50, p99  time.Duration
	redisCPU  float64          // seconds used by redis-server while measuring
	calls     map[string]int64 // Redis commands run while measuring, by name
	scriptUs  int64            // µs Redis spent inside EVAL/EVALSHA (scripts' inner calls included)
	goCPU     time.Duration    // CPU used by this process while measuring
	rounds    int              // how many runs this one is the median of
	spread    float64          // (max-min)/median decisions/s over those runs
}

func (r *caseResult) rate() float64 {
	if r.elapsed <= 0 {
		return 0
	}
	return float64(r.decisions) / r.elapsed.Seconds()
}

// totalCalls counts the Redis commands of the case, the harness's own
// INFO/CONFIG excluded. Commands run by scripts count too.
func (r *caseResult) totalCalls() int64 {
	var n int64
	for k, v := range r.calls {
		if !benchOverhead[k] {
			n += v
		}
	}
	return n
}

type runConfig struct {
	dur, warmup time.Duration
	keys        []string
	poolSize    int
}

// keyPrefix starts every key of a run.
const keyPrefix = "k"

func makeKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = keyPrefix + strconv.Itoa(i)
	}
	return keys
}

// runCase measures one case on a freshly flushed server with a fresh client
// and a fresh instance of the implementation.
func runCase(ctx context.Context, admin *redis.Client, addr string, im *impl, path string, conc int, cfg runConfig) (*caseResult, error) {
	if err := admin.FlushAll(ctx).Err(); err != nil {
		return nil, fmt.Errorf("FLUSHALL: %w", err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr, DisableIdentity: true, PoolSize: cfg.poolSize})
	defer rdb.Close()
	q := allowQuota
	switch path {
	case "deny":
		q = denyQuota
	case "hot":
		q = hotQuota
		cfg.keys = cfg.keys[:1] // every goroutine takes one key
	}
	newWorker, cleanup, err := im.build(rdb, q)
	if err != nil {
		return nil, fmt.Errorf("%s: set up: %w", im.name, err)
	}
	defer cleanup()

	if path == "deny" {
		if err := exhaust(ctx, newWorker, cfg.keys, q.largest()); err != nil {
			return nil, fmt.Errorf("%s: exhaust keys: %w", im.name, err)
		}
	}
	workers := make([]decideFunc, conc)
	for i := range workers {
		workers[i] = newWorker()
	}
	res := &caseResult{im: im, path: path, conc: conc}
	if cfg.warmup > 0 {
		drive(ctx, workers, im, cfg.keys, cfg.warmup, &caseResult{})
	}
	if err := admin.ConfigResetStat(ctx).Err(); err != nil {
		return nil, fmt.Errorf("CONFIG RESETSTAT: %w", err)
	}
	before, err := snapshot(ctx, admin)
	if err != nil {
		return nil, err
	}
	cpu0 := processCPU()
	drive(ctx, workers, im, cfg.keys, cfg.dur, res)
	res.goCPU = processCPU() - cpu0
	after, err := snapshot(ctx, admin)
	if err != nil {
		return nil, err
	}
	res.redisCPU = after.cpu - before.cpu
	res.calls = make(map[string]int64)
	for k, v := range after.calls {
		if d := v - before.calls[k]; d > 0 {
			res.calls[k] = d
		}
	}
	for _, k := range []string{"eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro"} {
		res.scriptUs += after.usec[k] - before.usec[k]
	}
	return res, ctx.Err()
}

// exhaust spends every key's allowance, calling each key until it is denied.
func exhaust(ctx context.Context, newWorker func() decideFunc, keys []string, limit int64) error {
	const parallel = 16
	var wg sync.WaitGroup
	errs := make([]error, parallel)
	for w := range parallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f := newWorker()
			for i := w; i < len(keys); i += parallel {
				denied := false
				for range 2*limit + 10 {
					ok, err := f(ctx, keys[i])
					if err != nil {
						errs[w] = err
						return
					}
					if !ok {
						denied = true
						break
					}
				}
				if !denied {
					errs[w] = fmt.Errorf("key %q still allowed after %d calls", keys[i], 2*limit+10)
					return
				}
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

type workerStats struct {
	ops, allowed, errors int64
	firstErr             error
	lat                  []uint32 // ns
}

// drive runs the workers for dur, each cycling over all keys from its own
// starting point, and fills res with counts and latency percentiles.
func drive(ctx context.Context, workers []decideFunc, im *impl, keys []string, dur time.Duration, res *caseResult) {
	var stop atomic.Bool
	stats := make([]workerStats, len(workers))
	var wg sync.WaitGroup
	start := time.Now()
	timer := time.AfterFunc(dur, func() { stop.Store(true) })
	defer timer.Stop()
	for g, f := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st := &stats[g]
			if im.timeAll {
				st.lat = make([]uint32, 0, 1<<14)
			}
			idx := g * len(keys) / len(workers)
			for !stop.Load() && ctx.Err() == nil {
				key := keys[idx]
				if idx++; idx == len(keys) {
					idx = 0
				}
				var ok bool
				var err error
				if im.timeAll || st.ops%sampleEvery == 0 {
					t0 := time.Now()
					ok, err = f(ctx, key)
					st.lat = append(st.lat, uint32(min(time.Since(t0), 1<<32-1)))
				} else {
					ok, err = f(ctx, key)
				}
				st.ops++
				switch {
				case err != nil:
					st.errors++
					if st.firstErr == nil {
						st.firstErr = err
					}
				case ok:
					st.allowed++
				}
			}
		}()
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	batch := int64(max(im.batch, 1))
	var lat []uint32
	for i := range stats {
		st := &stats[i]
		res.decisions += st.ops * batch
		res.allowed += st.allowed * batch
		res.errors += st.errors
		if res.firstErr == nil {
			res.firstErr = st.firstErr
		}
		lat = append(lat, st.lat...)
	}
	slices.Sort(lat)
	res.p50 = percentile(lat, 0.50)
	res.p99 = percentile(lat, 0.99)
}

func percentile(sorted []uint32, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p*float64(len(sorted))+0.5) - 1
	i = max(0, min(i, len(sorted)-1))
	return time.Duration(sorted[i])
}
