package memorystore_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/core/storetest"
	"github.com/sluicehq/sluice/internal/calendartest"
)

// Calendar windows (store.PerCalendar) across month ends, daylight saving
// changes and weeks from Monday: the true end of each window in
// ResetAfter and RetryAfter.
func TestMemoryCalendar(t *testing.T) {
	calendartest.Run(t, func(t *testing.T) (store.Store, func(time.Time)) {
		c := storetest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
		return memorystore.New(memorystore.WithClock(c.Now)), func(at time.Time) { c.Advance(at.Sub(c.Now())) }
	})
}

// One calendar limit parsed twice (each parse loads its zone anew) keeps
// one state: a config reload, or a second Limiter, does not start a
// client's month afresh.
func TestMemoryCalendarZoneLoadedTwice(t *testing.T) {
	var specs [2]store.Spec
	for i := range specs {
		l, err := store.ParseLimit("2/month@Europe/Berlin")
		if err != nil {
			t.Fatal(err)
		}
		if specs[i], err = l.Spec(); err != nil {
			t.Fatal(err)
		}
	}
	s := memorystore.New()
	ctx := context.Background()
	for i, sp := range []store.Spec{specs[0], specs[1], specs[1]} {
		res, err := s.Take(ctx, "client", 1, sp)
		if err != nil {
			t.Fatal(err)
		}
		if want := i < 2; res.Allowed != want {
			t.Fatalf("take %d (with the limit of parse %d): allowed %v, want %v", i+1, min(i, 1)+1, res.Allowed, want)
		}
	}
}
