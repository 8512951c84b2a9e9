package arith

import (
	"time"

	"github.com/sluicehq/sluice/core/store"
)

// CalendarWindow returns the window of a calendar limit of unit in zone
// (see store.Spec.Calendar) that holds now: its start and end in µs since the
// epoch, end the start of the next. Windows start at 00:00 local time on
// each day, on Mondays for weeks, on the 1st for months: start(k) for the
// k-th day, week or month, as time.Date computes it (when a change of
// offset skips midnight, an instant of the change). Every boundary is
// start(k) of one k, so the windows tile the time line whatever the zone
// does; the one holding now is found from now's local date, then moved by
// a unit while now lies outside it.
func CalendarWindow(unit string, zone *time.Location, now int64) (start, end int64) {
	t := time.UnixMicro(now).In(zone)
	y, m, d := t.Date()
	switch unit {
	case "week":
		d -= (int(t.Weekday()) + 6) % 7 // back to Monday
	case "month":
		d = 1
	}
	at := func(k int) int64 { // the start of the window k units after the first guess
		switch unit {
		case "day":
			return time.Date(y, m, d+k, 0, 0, 0, 0, zone).UnixMicro()
		case "week":
			return time.Date(y, m, d+7*k, 0, 0, 0, 0, zone).UnixMicro()
		}
		return time.Date(y, m+time.Month(k), 1, 0, 0, 0, 0, zone).UnixMicro()
	}
	k := 0
	start, end = at(0), at(1)
	for now < start && k > -2 {
		k--
		start, end = at(k), start
	}
	for now >= end && k < 2 {
		k++
		start, end = end, at(k+1)
	}
	return start, end
}

// CalendarBounds returns the boundaries b0 < b1 < b2 of two consecutive
// windows of the calendar limit s around now, as the Redis store sends
// them to its scripts (which know no zones): the window holding now and
// the one next to the nearer of its ends, so that a server whose clock
// differs from now by less than half a window still finds its own
// window among the two.
func CalendarBounds(s *store.Spec, now int64) [3]int64 {
	unit, zone := s.Calendar()
	start, end := CalendarWindow(unit, zone, now)
	if now-start < end-now {
		prev, _ := CalendarWindow(unit, zone, start-1)
		return [3]int64{prev, start, end}
	}
	_, next := CalendarWindow(unit, zone, end)
	return [3]int64{start, end, next}
}
