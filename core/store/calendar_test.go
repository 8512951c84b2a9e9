package store

import (
	"errors"
	"strings"
	"testing"
	"time"
	_ "time/tzdata" // the zones, whatever the machine has
)

func TestParseLimitCalendar(t *testing.T) {
	berlin, err := loadZone("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	withPenalty := PerCalendar(5, "week", berlin)
	withPenalty.Penalty = time.Minute
	for _, tc := range []struct {
		in, str string
		want    Limit
	}{
		{"10000/month", "10000/month@UTC", PerCalendar(10000, "month", time.UTC)},
		{"10000/Month@utc", "10000/month@UTC", PerCalendar(10000, "month", time.UTC)},
		{"500/week", "500/week@UTC", PerCalendar(500, "week", time.UTC)},
		{"100/day@UTC", "100/day@UTC", PerCalendar(100, "day", time.UTC)},
		{"10000/month@Europe/Berlin", "10000/month@Europe/Berlin", PerCalendar(10000, "month", berlin)},
		{"5/week@Europe/Berlin penalty 1m fixed_window", "5/week@Europe/Berlin penalty 1m", withPenalty},
		{"100/day", "100/d", Limit{Rate: 100, Period: 24 * time.Hour}}, // not a calendar day
	} {
		got, err := ParseLimit(tc.in)
		if err != nil {
			t.Errorf("ParseLimit(%q): %v", tc.in, err)
			continue
		}
		if !sameLimit(got, tc.want) || got.String() != tc.str {
			t.Errorf("ParseLimit(%q) = %#v (%q), want %#v (%q)", tc.in, got, got.String(), tc.want, tc.str)
		}
		if back, err := ParseLimit(got.String()); err != nil || !sameLimit(back, got) {
			t.Errorf("ParseLimit(%q) = %#v, %v: not the same limit", got.String(), back, err)
		}
	}
	for _, tc := range []struct{ in, msg string }{
		{"10/month gcra", `a calendar window is a fixed_window, not "gcra"`},
		{"10/week token_bucket", `a calendar window is a fixed_window, not "token_bucket"`},
		{"10/month burst 3", "takes no burst"},
		{"0/month", "rate must be positive"},
		{"10/hour@UTC", `"hour" before "@" is not a calendar unit`},
		{"10/2month", `unknown unit "month"`},
		{"10/month@", `missing zone after "@"`},
		{"10/month@Nowhere/Atlantis", `zone "Nowhere/Atlantis"`},
		{"10/month@Local", "time.Local differs from one machine to the next"},
		{"10/month@UTC@UTC", `zone "UTC@UTC"`},
	} {
		_, err := ParseLimit(tc.in)
		if err == nil || !errors.Is(err, ErrInvalidLimit) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("ParseLimit(%q) = %v, want an ErrInvalidLimit saying %q", tc.in, err, tc.msg)
		}
	}
}

func TestPerCalendarValidate(t *testing.T) {
	fixed := time.FixedZone("", 3600)
	withPeriod := PerCalendar(1, "day", time.UTC)
	withPeriod.Period = time.Hour
	gcra := PerCalendar(1, "day", time.UTC)
	gcra.Algorithm = GCRA
	for _, tc := range []struct {
		l   Limit
		msg string
	}{
		{PerCalendar(1, "hour", time.UTC), `unknown calendar unit "hour"`},
		{PerCalendar(1, "", time.UTC), `unknown calendar unit ""`},
		{PerCalendar(1, "Month", time.UTC), `unknown calendar unit "Month"`},
		{PerCalendar(1, "day", nil), "needs a zone"},
		{PerCalendar(1, "day", time.Local), "time.Local"},
		{PerCalendar(1, "day", fixed), "the zone has no name"},
		{PerCalendar(0, "day", time.UTC), "rate must be positive"},
		{PerCalendar(-3, "week", time.UTC), "rate must be positive"},
		{withPeriod, "leave Period 0"},
		{gcra, `not "gcra"`},
	} {
		err := tc.l.validate()
		if err == nil || !errors.Is(err, ErrInvalidLimit) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%v.Spec() = %v, want an ErrInvalidLimit saying %q", tc.l, err, tc.msg)
		}
	}
	s, err := PerCalendar(7, "month", time.UTC).Spec()
	if err != nil {
		t.Fatal(err)
	}
	if unit, zone := s.Calendar(); unit != "month" || zone != time.UTC || s.Algorithm() != FixedWindow ||
		s.Period() != int64(31*24*time.Hour/time.Microsecond) || s.Capacity() != 7 ||
		s.Horizon() != int64(32*24*time.Hour/time.Microsecond) {
		t.Errorf("Spec of 7/month@UTC: %+v", s)
	}
	if unit, zone := PerMinute(1).mustSpec(t).Calendar(); unit != "" || zone != nil {
		t.Errorf("PerMinute's Calendar() = %q, %v", unit, zone)
	}
}

func (l Limit) mustSpec(t *testing.T) Spec {
	t.Helper()
	s, err := l.Spec()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// sameLimit reports whether a and b are the same limit: equal, but for a
// calendar zone, compared by name (time.LoadLocation loads a zone anew).
func sameLimit(a, b Limit) bool {
	za, zb := a.zone, b.zone
	a.zone, b.zone = nil, nil
	return a == b && zoneName(za) == zoneName(zb)
}
