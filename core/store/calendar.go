package store

import (
	"strings"
	"time"
)

// calendarLength returns the nominal length of a calendar unit, Spec's
// Period; 0 for a string that is not one.
func calendarLength(unit string) time.Duration {
	switch unit {
	case "day":
		return day
	case "week":
		return 7 * day
	case "month":
		return 31 * day
	}
	return 0
}

// calendarSlack is how much longer than its nominal length a calendar
// window may last (a daylight saving change adds an hour; a zone that
// changes its offset, more): Horizon's margin.
const calendarSlack = day

func (l Limit) normalizeCalendar() (Spec, error) {
	length := calendarLength(l.calendar)
	switch {
	case length == 0:
		return Spec{}, invalid(l, "unknown calendar unit %s (want day, week or month)", l.calendar)
	case l.zone == nil:
		return Spec{}, invalid(l, "a calendar window needs a zone (time.UTC, or one from time.LoadLocation), not nil")
	case l.zone == time.Local || l.zone.String() == "Local":
		return Spec{}, invalid(l, "time.Local differs from one machine to the next: name the zone (time.LoadLocation)")
	case l.zone.String() == "":
		return Spec{}, invalid(l, "the zone has no name: every process knows a calendar window's zone by its name")
	case l.Algorithm != FixedWindow:
		return Spec{}, invalid(l, "a calendar window is a fixed_window, not %q", string(l.Algorithm))
	case l.Rate <= 0:
		return Spec{}, invalid(l, "rate must be positive")
	case l.Rate >= maxExact:
		return Spec{}, invalid(l, "rate must be below 2^53")
	case l.Period != 0:
		return Spec{}, invalid(l, "a calendar window takes its length from the calendar; leave Period 0")
	case l.Burst != 0:
		return Spec{}, invalid(l, "fixed_window takes no burst; leave Burst 0")
	case l.Penalty < 0:
		return Spec{}, invalid(l, "penalty must not be negative")
	}
	s := Spec{alg: FixedWindow, rate: l.Rate, period: int64(length / time.Microsecond), calendar: l.calendar, zone: l.zone}
	s.penalty = int64(l.Penalty / time.Microsecond)
	if l.Penalty%time.Microsecond != 0 {
		s.penalty++
	}
	if s.penalty >= maxExact {
		return Spec{}, invalid(l, "penalty must be below 2^53 microseconds")
	}
	return s, nil
}

// zoneName is the name a calendar limit's zone is written with.
func zoneName(z *time.Location) string {
	if z == nil {
		return "<nil>"
	}
	return z.String()
}

// loadZone returns the zone of name, "UTC" for "".
func loadZone(name string) (*time.Location, error) {
	if name == "" || strings.EqualFold(name, "utc") {
		return time.UTC, nil
	}
	z, err := time.LoadLocation(name)
	if err != nil {
		return nil, err
	}
	return z, nil // time.Local is refused by Limit.Spec
}
