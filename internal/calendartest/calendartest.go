// Package calendartest holds the calendar windows' cases (store.PerCalendar)
// that the memory store's and the Redis store's tests both run, so that the
// two stores are held to the same figures: across month ends (leap year
// included), daylight saving changes (Europe/Berlin, America/New_York) and
// weeks from Monday. Every instant is written in UTC, as the zone database
// places the local boundaries, rather than computed.
package calendartest

import (
	"context"
	"reflect"
	"testing"
	"time"
	_ "time/tzdata" // the zones, whatever the machine has

	"github.com/sluicehq/sluice/core/store"
)

// Step is one Take of n at At and what it must return: Allowed, Remaining,
// and ResetAfter (and, when denied, RetryAfter) up to the instant Reset.
type Step struct {
	At        string // RFC 3339, UTC
	N         int64
	Allowed   bool
	Remaining int64
	Reset     string // RFC 3339, UTC: the true end of the window
}

// Case is a sequence of Steps on one fresh key.
type Case struct {
	Name  string
	Limit store.Limit
	Steps []Step
}

func zone(tb testing.TB, name string) *time.Location {
	tb.Helper()
	z, err := time.LoadLocation(name)
	if err != nil {
		tb.Fatalf("LoadLocation(%q): %v", name, err)
	}
	return z
}

// Cases returns every case.
func Cases(tb testing.TB) []Case {
	berlin, newYork := zone(tb, "Europe/Berlin"), zone(tb, "America/New_York")
	return []Case{
		{"MonthUTC/Jan31-Feb1-Mar1", store.PerCalendar(3, "month", time.UTC), []Step{
			{"2026-01-31T23:59:59Z", 2, true, 1, "2026-02-01T00:00:00Z"},
			{"2026-01-31T23:59:59.5Z", 2, false, 1, "2026-02-01T00:00:00Z"},
			{"2026-01-31T23:59:59.5Z", 1, true, 0, "2026-02-01T00:00:00Z"},
			{"2026-02-01T00:00:00Z", 3, true, 0, "2026-03-01T00:00:00Z"}, // a fresh window of 28 days
			{"2026-02-28T23:59:59.999999Z", 1, false, 0, "2026-03-01T00:00:00Z"},
			{"2026-03-01T00:00:00Z", 1, true, 2, "2026-04-01T00:00:00Z"},
		}},
		{"MonthBerlin/Feb29-Mar1-leap", store.PerCalendar(2, "month", berlin), []Step{
			{"2028-02-28T23:00:00Z", 2, true, 0, "2028-02-29T23:00:00Z"}, // Feb 29 00:00 CET: a day left
			{"2028-02-29T22:59:59Z", 1, false, 0, "2028-02-29T23:00:00Z"},
			// March 1 00:00 CET; April 1 00:00 CEST (summer time from March 26)
			{"2028-02-29T23:00:00Z", 1, true, 1, "2028-03-31T22:00:00Z"},
		}},
		{"MonthNewYork/Feb28-Mar1", store.PerCalendar(1, "month", newYork), []Step{
			{"2026-02-28T12:00:00Z", 1, true, 0, "2026-03-01T05:00:00Z"},
			{"2026-03-01T04:59:59Z", 1, false, 0, "2026-03-01T05:00:00Z"},
			{"2026-03-01T05:00:00Z", 1, true, 0, "2026-04-01T04:00:00Z"}, // EDT from March 8
		}},
		{"DayBerlin/23h", store.PerCalendar(1, "day", berlin), []Step{
			{"2026-03-28T23:00:00Z", 1, true, 0, "2026-03-29T22:00:00Z"}, // March 29, 00:00 CET to 00:00 CEST
			{"2026-03-29T21:59:59Z", 1, false, 0, "2026-03-29T22:00:00Z"},
			{"2026-03-29T22:00:00Z", 1, true, 0, "2026-03-30T22:00:00Z"},
		}},
		{"DayBerlin/25h", store.PerCalendar(1, "day", berlin), []Step{
			{"2026-10-24T22:00:00Z", 1, true, 0, "2026-10-25T23:00:00Z"}, // October 25, 00:00 CEST to 00:00 CET
			{"2026-10-25T22:59:59Z", 1, false, 0, "2026-10-25T23:00:00Z"},
			{"2026-10-25T23:00:00Z", 1, true, 0, "2026-10-26T23:00:00Z"},
		}},
		{"DayNewYork/23h", store.PerCalendar(2, "day", newYork), []Step{
			{"2026-03-08T05:00:00Z", 1, true, 1, "2026-03-09T04:00:00Z"},
			{"2026-03-09T03:59:59.999999Z", 2, false, 1, "2026-03-09T04:00:00Z"},
			{"2026-03-09T04:00:00Z", 2, true, 0, "2026-03-10T04:00:00Z"},
		}},
		{"DayNewYork/25h", store.PerCalendar(2, "day", newYork), []Step{
			{"2026-11-01T04:00:00Z", 2, true, 0, "2026-11-02T05:00:00Z"},
			{"2026-11-02T04:30:00Z", 1, false, 0, "2026-11-02T05:00:00Z"},
			{"2026-11-02T05:00:00Z", 1, true, 1, "2026-11-03T05:00:00Z"},
		}},
		{"WeekUTC/FromMonday", store.PerCalendar(2, "week", time.UTC), []Step{
			{"2026-01-01T12:00:00Z", 2, true, 0, "2026-01-05T00:00:00Z"}, // a Thursday
			{"2026-01-04T23:59:59Z", 1, false, 0, "2026-01-05T00:00:00Z"},
			{"2026-01-05T00:00:00Z", 1, true, 1, "2026-01-12T00:00:00Z"},
		}},
		{"WeekBerlin/167h", store.PerCalendar(1, "week", berlin), []Step{
			{"2026-03-22T23:00:00Z", 1, true, 0, "2026-03-29T22:00:00Z"}, // Monday March 23, 00:00 CET
			{"2026-03-29T21:59:59Z", 1, false, 0, "2026-03-29T22:00:00Z"},
			{"2026-03-29T22:00:00Z", 1, true, 0, "2026-04-05T22:00:00Z"},
		}},
	}
}

// Run runs every case on a fresh store from newStore, whose set moves
// the store's clock (and the Redis server's) to an instant.
func Run(t *testing.T, newStore func(t *testing.T) (s store.Store, set func(time.Time))) {
	for _, c := range Cases(t) {
		t.Run(c.Name, func(t *testing.T) {
			s, set := newStore(t)
			spec, err := c.Limit.Spec()
			if err != nil {
				t.Fatal(err)
			}
			for i, st := range c.Steps {
				at, reset := parse(t, st.At), parse(t, st.Reset)
				set(at)
				r, err := s.Take(context.Background(), "k", st.N, spec)
				if err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				want := store.Result{Allowed: st.Allowed, Limit: c.Limit.Rate, Remaining: st.Remaining, ResetAfter: reset.Sub(at)}
				if !st.Allowed {
					want.RetryAfter = reset.Sub(at)
				}
				if !reflect.DeepEqual(r, want) {
					t.Errorf("step %d at %s: Take(%d) = %+v, want %+v", i, st.At, st.N, r, want)
				}
			}
		})
	}
}

func parse(tb testing.TB, s string) time.Time {
	tb.Helper()
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		tb.Fatal(err)
	}
	return t
}
