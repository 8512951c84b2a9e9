package otellimit_test

import (
	"errors"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/otellimit"
)

func TestStoreStats(t *testing.T) {
	stats := store.Stats{Instances: 3, Breakers: map[string]bool{"10.0.0.1:6379": true, "10.0.0.2:6379": false},
		Debts: 2, OldestDebt: 1500 * time.Millisecond, Warnings: map[string]int64{"eviction": 2, "restart": 1}}
	_, rd := newRecorder(t, otellimit.WithStoreStats(func() store.Stats { return stats }))
	for name, want := range map[string]map[string]float64{
		"sluice.store.instances":    {"": 3},
		"sluice.store.breaker_open": {`server="10.0.0.1:6379"`: 1, `server="10.0.0.2:6379"`: 0},
		"sluice.store.debts":        {"": 2},
		"sluice.store.oldest_debt":  {"": 1.5},
		"sluice.store.warnings":     {`kind="eviction"`: 2, `kind="restart"`: 1},
	} {
		if got := series(t, rd, name); !equal(got, want) {
			t.Errorf("%s: %v, want %v", name, got, want)
		}
	}
	stats.Instances = 0 // read at each collection
	if got := series(t, rd, "sluice.store.instances"); got[""] != 0 {
		t.Errorf("instances after the change: %v, want 0", got)
	}
	mp := sdkmetric.NewMeterProvider()
	if _, err := otellimit.New(mp, otellimit.WithStoreStats(nil)); !errors.Is(err, core.ErrInvalidOption) {
		t.Errorf("WithStoreStats(nil): %v, want ErrInvalidOption", err)
	}
}

func equal(a, b map[string]float64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}
