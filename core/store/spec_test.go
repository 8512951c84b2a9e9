package store_test

import (
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/store"
)

// Limit.Spec is the only way to a valid Spec: it applies the defaults and
// converts to µs; the zero Spec has Rate 0, which stores refuse (see
// storetest's bad-input cases).
func TestSpec(t *testing.T) {
	if (store.Spec{}).Rate() != 0 {
		t.Error("the zero Spec has a Rate")
	}
	sp, err := store.Limit{Rate: 3, Period: time.Second, Penalty: 1500 * time.Nanosecond}.Spec()
	if err != nil {
		t.Fatal(err)
	}
	got := [...]int64{sp.Rate(), sp.Period(), sp.Burst(), sp.Penalty(), sp.Interval(), sp.Capacity(), sp.Horizon()}
	want := [...]int64{3, 1_000_000, 3, 2, 333_334, 3, 3 * 333_334}
	if sp.Algorithm() != store.GCRA || got != want {
		t.Errorf("Spec of 3/s penalty 1.5µs: %s %v, want gcra %v", sp.Algorithm(), got, want)
	}
	if _, err := (store.Limit{Rate: 1}).Spec(); !errors.Is(err, store.ErrInvalidLimit) {
		t.Errorf("Limit without a Period: Spec error %v, want ErrInvalidLimit", err)
	}
}
