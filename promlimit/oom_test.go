package promlimit_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/internal/partial"
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

func TestStoreWarning(t *testing.T) {
	c, reg := newCollector(t)
	c.StoreWarning("eviction")
	c.StoreWarning("eviction")
	c.StoreWarning("restart")
	wantSeries(t, reg, "sluice_store_warnings_total", map[string]float64{`kind="eviction"`: 2, `kind="restart"`: 1})
}
