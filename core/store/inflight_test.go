package store_test

import (
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/store"
)

// An InFlight limit is validated like the others: n ≥ 1 slots, at most
// MaxInFlightSlots, a hold of whole µs, no Burst nor Penalty; its
// capacity is n, its horizon the hold, and its text form parses back.
func TestInFlightLimit(t *testing.T) {
	bad := []store.Limit{
		{Algorithm: store.InFlight, Rate: 0, Period: time.Second},
		{Algorithm: store.InFlight, Rate: -1, Period: time.Second},
		{Algorithm: store.InFlight, Rate: 3, Period: 0},
		{Algorithm: store.InFlight, Rate: 3, Period: time.Second + time.Nanosecond},
		{Algorithm: store.InFlight, Rate: 100_000 + 1, Period: time.Second},
		{Algorithm: store.InFlight, Rate: 3, Period: time.Second, Burst: 4},
		{Algorithm: store.InFlight, Rate: 3, Period: time.Second, Penalty: time.Second},
	}
	for _, l := range bad {
		if _, err := l.Spec(); !errors.Is(err, store.ErrInvalidLimit) {
			t.Errorf("%#v: Validate() = %v, want ErrInvalidLimit", l, err)
		}
	}
	l := store.Limit{Algorithm: store.InFlight, Rate: 3, Period: 10 * time.Second}
	sp, err := l.Spec()
	if err != nil {
		t.Fatal(err)
	}
	if sp.Capacity() != 3 || sp.Horizon() != 10_000_000 || sp.Burst() != 0 {
		t.Errorf("Spec of %v: capacity %d horizon %d burst %d", l, sp.Capacity(), sp.Horizon(), sp.Burst())
	}
	if s := l.String(); s != "3/10s in_flight" {
		t.Errorf("String() = %q, want \"3/10s in_flight\"", s)
	}
	var back store.Limit
	if err := back.UnmarshalText([]byte(l.String())); err != nil || back != l {
		t.Errorf("parsing %q: %v, %v; want %v", l.String(), back, err, l)
	}
	for _, a := range store.Algorithms() {
		if a == store.InFlight {
			t.Error("Algorithms() lists InFlight, which is not a rate")
		}
	}
}
