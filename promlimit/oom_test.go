package promlimit_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/internal/partial"
	"github.com/sluicehq/sluice/promlimit"
)

// oomStore fails as the Redis store does when Redis has no memory left.
type oomStore struct{ partial.Store }

func (oomStore) Take(context.Context, string, int64, ...store.Spec) (store.Result, error) {
	return store.Result{}, fmt.Errorf("redisstore: take 1 on 1 limit(s): %w: OOM command not allowed", store.ErrOutOfMemory)
}

func TestOOMKind(t *testing.T) {
	c, reg := newCollector(t)
	l := newLimiter(t, oomStore{}, "api", []store.Limit{store.PerSecond(1)}, core.WithObserver(c.Observe), core.WithFailurePolicy(core.FailOpen))
	decide(l, 3, "a")
	errs := series(t, reg, "sluice_store_errors_total")
	if errs[`kind="oom",limiter="api"`] != 3 || errs[`kind="error",limiter="api"`] != 0 {
		t.Errorf("store errors: %v, want 3 of kind oom", errs)
	}
}

func TestStoreStats(t *testing.T) {
	stats := store.Stats{Instances: 3, Breakers: map[string]bool{"10.0.0.1:6379": true, "10.0.0.2:6379": false},
		Debts: 2, OldestDebt: 1500 * time.Millisecond, Warnings: map[string]int64{"eviction": 2, "restart": 1}}
	calls := 0
	_, reg := newCollector(t, promlimit.WithStoreStats(func() store.Stats { calls++; return stats }))
	wantSeries(t, reg, "sluice_store_instances", map[string]float64{"": 3})
	wantSeries(t, reg, "sluice_store_breaker_open", map[string]float64{`server="10.0.0.1:6379"`: 1, `server="10.0.0.2:6379"`: 0})
	wantSeries(t, reg, "sluice_store_debts", map[string]float64{"": 2})
	wantSeries(t, reg, "sluice_store_oldest_debt_seconds", map[string]float64{"": 1.5})
	wantSeries(t, reg, "sluice_store_warnings_total", map[string]float64{`kind="eviction"`: 2, `kind="restart"`: 1})
	stats.Instances = 0 // read at each scrape
	wantSeries(t, reg, "sluice_store_instances", map[string]float64{"": 0})
	if calls < 6 {
		t.Errorf("stats read %d times, want once per scrape", calls)
	}
	if _, err := promlimit.New(prometheus.NewRegistry(), promlimit.WithStoreStats(nil)); !errors.Is(err, core.ErrInvalidOption) {
		t.Errorf("WithStoreStats(nil): %v, want ErrInvalidOption", err)
	}
}
