package core

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/store"
)

// Penalties near MaxInt64 once wrapped negative when rounded up to
// microseconds and then passed Validate.
func TestValidateRejectsHugePenaltyWithoutOverflow(t *testing.T) {
	for _, p := range []time.Duration{math.MaxInt64, math.MaxInt64 - 807, math.MaxInt64 - 998, 1<<53*time.Microsecond + 1} {
		l := store.Limit{Rate: 1, Period: time.Second, Penalty: p}
		if _, err := l.Spec(); !errors.Is(err, store.ErrInvalidLimit) {
			t.Errorf("Validate(penalty %d) = %v, want ErrInvalidLimit", int64(p), err)
		}
	}
	for _, tc := range []struct {
		penalty time.Duration
		want    int64
	}{{1, 1}, {time.Microsecond, 1}, {time.Microsecond + 1, 2}, {time.Second, 1e6}} {
		sp, err := store.Limit{Rate: 1, Period: time.Second, Penalty: tc.penalty}.Spec()
		if err != nil || sp.Penalty() != tc.want {
			t.Errorf("Spec(penalty %v).Penalty = %d, %v; want %d (rounded up)", tc.penalty, sp.Penalty(), err, tc.want)
		}
	}
}
