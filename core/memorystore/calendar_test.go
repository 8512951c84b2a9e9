package memorystore_test

import (
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
