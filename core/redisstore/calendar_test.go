package redisstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/internal/calendartest"
)

// setAt moves the client's clock (the boundaries it sends) and Redis'
// TIME to at, and Redis' TTLs with them.
func (x *mini) setAt(at time.Time) {
	if d := at.Sub(x.now); d > 0 {
		x.m.FastForward(d)
	}
	x.now = at
	x.m.SetTime(at)
}

// Calendar windows on Redis, whose TIME decides: the same cases and
// figures as the memory store's (memorystore.TestMemoryCalendar), with
// and without the deny cache.
func TestMiniredisCalendar(t *testing.T) {
	for _, deny := range []int{0, 64} {
		t.Run(fmt.Sprintf("deny%d", deny), func(t *testing.T) {
			calendartest.Run(t, func(t *testing.T) (store.Store, func(time.Time)) {
				x := newMini(t, WithDenyCache(deny))
				x.store.wall = func() time.Time { return x.now }
				return x.store, x.setAt
			})
		})
	}
}

// The key of a calendar window lives until the window's true end: a
// February of 28 days in UTC, a Berlin day of 25 hours.
func TestMiniredisCalendarTTL(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		l   store.Limit
		at  time.Time
		ttl time.Duration
	}{
		{store.PerCalendar(5, "month", time.UTC), time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC), 28 * 24 * time.Hour},
		{store.PerCalendar(5, "day", berlin), time.Date(2026, 10, 24, 22, 0, 0, 0, time.UTC), 25 * time.Hour},
		{store.PerCalendar(5, "week", berlin), time.Date(2026, 3, 22, 23, 0, 0, 0, time.UTC), 167 * time.Hour},
	} {
		x := newMini(t)
		x.store.wall = func() time.Time { return x.now }
		x.setAt(c.at)
		x.take("k", 1, c.l)
		if got := x.m.TTL(x.keyOf("k", c.l)); got != c.ttl {
			t.Errorf("%v at %v: TTL %v, want %v", c.l, c.at, got, c.ttl)
		}
	}
}

// Redis' clock decides the window when the client's differs: ahead or
// behind across a boundary, by less than half a window, the window of
// Redis' clock is charged; by more, the nearest of the two windows sent.
func TestMiniredisCalendarSkew(t *testing.T) {
	month := store.PerCalendar(1, "month", time.UTC)
	day := store.PerCalendar(1, "day", time.UTC)
	utc := func(s string) time.Time {
		t.Helper()
		v, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, c := range []struct {
		name          string
		l             store.Limit
		client, redis string
		reset         string // the window end Redis' clock finds
	}{
		{"RedisAhead", month, "2026-01-31T23:59:50Z", "2026-02-01T00:00:05Z", "2026-03-01T00:00:00Z"},
		{"RedisBehind", month, "2026-02-01T00:00:05Z", "2026-01-31T23:59:50Z", "2026-02-01T00:00:00Z"},
		{"RedisAheadHalfAMonth", month, "2026-01-20T00:00:00Z", "2026-02-10T00:00:00Z", "2026-03-01T00:00:00Z"},
		// Beyond the two windows sent: the nearest instant inside them.
		{"RedisFarAhead", day, "2026-01-10T03:00:00Z", "2026-01-11T06:00:00Z", "2026-01-11T06:00:00.000001Z"},
		{"RedisFarBehind", day, "2026-01-10T20:00:00Z", "2026-01-09T06:00:00Z", "2026-01-11T00:00:00Z"},
	} {
		t.Run(c.name, func(t *testing.T) {
			x := newMini(t)
			client := utc(c.client)
			x.store.wall = func() time.Time { return client }
			at := utc(c.redis)
			x.setAt(at)
			r := x.take("k", 1, c.l)
			want := utc(c.reset).Sub(at)
			if c.name == "RedisFarBehind" {
				want = utc(c.reset).Sub(utc("2026-01-10T00:00:00Z")) // counted as at b0
			}
			if !r.Allowed || r.ResetAfter != want {
				t.Errorf("Take = %+v, want allowed, ResetAfter %v", r, want)
			}
			// The client's clock now agrees with Redis': the window Redis
			// charged is the one it finds (but where it was clamped).
			client = at
			if r := x.take("k", 1, c.l); c.name != "RedisFarAhead" && c.name != "RedisFarBehind" && r.Allowed {
				t.Errorf("second Take = %+v, want denied", r)
			}
		})
	}
}

// A give-back (Charge, then Refund) reaches a calendar window's count only
// while the charge's window is current, on Redis as on the memory store.
func TestMiniredisCalendarRefund(t *testing.T) {
	ctx := context.Background()
	l := store.PerCalendar(3, "day", time.UTC)
	spec, _ := l.Spec()
	x := newMini(t)
	x.store.wall = func() time.Time { return x.now }
	mem := memorystore.New(memorystore.WithClock(func() time.Time { return x.now }))
	for _, s := range []store.Store{x.store, mem} {
		x.setAt(time.Date(2026, 1, 31, 23, 59, 59, 0, time.UTC))
		r1, err := s.Charge(ctx, "k", 2, spec)
		if err != nil || !r1.Allowed {
			t.Fatalf("%T: Charge = %+v, %v", s, r1, err)
		}
		x.setAt(time.Date(2026, 2, 1, 0, 0, 1, 0, time.UTC))
		r2, err := s.Charge(ctx, "k", 1, spec)
		if err != nil || !r2.Allowed {
			t.Fatalf("%T: Charge = %+v, %v", s, r2, err)
		}
		if err := s.Refund(ctx, "k", 2, r1.Stamp, spec); err != nil { // January's: nothing back
			t.Fatal(err)
		}
		if r, _ := s.Peek(ctx, "k", 0, spec); r.Remaining != 2 {
			t.Errorf("%T: after January's refund, Remaining %d, want 2", s, r.Remaining)
		}
		if err := s.Refund(ctx, "k", 1, r2.Stamp, spec); err != nil {
			t.Fatal(err)
		}
		if r, _ := s.Peek(ctx, "k", 0, spec); r.Remaining != 3 {
			t.Errorf("%T: after February's refund, Remaining %d, want 3", s, r.Remaining)
		}
	}
}

// On a real redis-server, whose clock is the machine's: a zone whose
// midnight falls 1.5 s from now (a fixed offset), so that the test sees a
// day end.
func TestRedisCalendarDayEnds(t *testing.T) {
	t.Parallel()
	s := realStore(t, sharedClient(t))
	boundary := time.Now().Add(1500 * time.Millisecond).Truncate(time.Second)
	offset := int((-boundary.Unix())%86400+86400) % 86400
	if offset > 43200 {
		offset -= 86400
	}
	zone := time.FixedZone(fmt.Sprintf("sluice-test%+d", offset), offset)
	l := store.PerCalendar(2, "day", zone)
	key := fmt.Sprintf("cal-%d", time.Now().UnixNano())

	before := time.Now()
	r := takeOK(t, s, key, 2, l)
	after := time.Now()
	if !r.Allowed || r.Remaining != 0 || r.ResetAfter > boundary.Sub(before) || r.ResetAfter < boundary.Sub(after)-slack {
		t.Fatalf("Take(2) = %+v, want allowed until %v (in about %v)", r, boundary, boundary.Sub(before))
	}
	r = takeOK(t, s, key, 1, l)
	if r.Allowed || r.RetryAfter != r.ResetAfter || r.RetryAfter > boundary.Sub(before) {
		t.Fatalf("Take(1) = %+v, want denied until %v", r, boundary)
	}
	time.Sleep(time.Until(boundary) + 50*time.Millisecond) // the day ends on Redis' real clock
	r = takeOK(t, s, key, 1, l)
	if !r.Allowed || r.Remaining != 1 || r.ResetAfter > 24*time.Hour || r.ResetAfter < 24*time.Hour-time.Second {
		t.Fatalf("Take(1) in the next day = %+v, want allowed, 1 left, for about 24h", r)
	}
}
