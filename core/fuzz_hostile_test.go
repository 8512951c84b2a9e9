package core_test

import (
	"context"
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/store"
)

// FuzzLimitArithmetic builds limits and costs from arbitrary integers,
// absurd ones included (huge rates, periods of a nanosecond, MaxInt64
// burst, penalty or cost). Every one is either refused by Validate (an
// error wrapping ErrInvalidLimit, also from core.New and from Take) or
// enforced sanely: its Spec is within the bounds ALGORITHMS.md states, and
// the memory store's decisions never panic and keep their invariants (an
// admitted request has no RetryAfter and Remaining within [0, Limit]; a
// denied one has a positive RetryAfter, InfDuration when the cost exceeds
// what the limit can ever admit at once, and is not charged).
func FuzzLimitArithmetic(f *testing.F) {
	for _, s := range []struct {
		alg                         uint8
		rate, period, burst, pen, n int64
	}{
		{0, 10, int64(time.Second), 0, 0, 1},
		{0, math.MaxInt64, 1, 0, 0, 1},
		{1, 1, int64(time.Nanosecond), 0, 0, 1},
		{2, math.MaxInt64 / 2, int64(time.Hour), 0, 0, math.MaxInt64},
		{3, 1 << 40, 1 << 50, 0, 0, 1},
		{4, 100_000, int64(time.Hour), 0, int64(time.Hour), 3},
		{5, 1, int64(time.Microsecond), math.MaxInt64, 0, 2},
		{1, 3, int64(time.Second), 5, int64(time.Minute), 6},
		{0, 1, int64(time.Second), 0, (1<<53 - 1) * 1000, 2},
		{2, 7, math.MaxInt64 - math.MaxInt64%1000, 0, 0, 8},
		{6, 1, int64(time.Second), 0, 0, 1},
		{0, -1, -1, -1, -1, -1},
	} {
		f.Add(s.alg, s.rate, s.period, s.burst, s.pen, s.n)
	}
	algs := append(append([]store.Algorithm(nil), store.Algorithms()...), "", "bogus")
	f.Fuzz(func(t *testing.T, alg uint8, rate, period, burst, pen, n int64) {
		lim := store.Limit{
			Algorithm: algs[int(alg)%len(algs)],
			Rate:      rate,
			Period:    time.Duration(period),
			Burst:     burst,
			Penalty:   time.Duration(pen),
		}
		now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		st := memorystore.New(memorystore.WithClock(func() time.Time { return now }))
		ctx := context.Background()
		sp, verr := lim.Spec()
		if verr != nil {
			if !errors.Is(verr, store.ErrInvalidLimit) {
				t.Fatalf("%v: Spec error %v does not wrap ErrInvalidLimit", lim, verr)
			}
			if _, err := core.New(st, "test", func(*http.Request) (string, error) { return "k", nil }, []store.Limit{lim}); !errors.Is(err, store.ErrInvalidLimit) {
				t.Fatalf("%v: core.New error %v, want ErrInvalidLimit", lim, err)
			}
			if _, err := st.Take(ctx, "k", 1, specs(lim)...); !errors.Is(err, store.ErrInvalidLimit) {
				t.Fatalf("%v: Take error %v, want ErrInvalidLimit", lim, err)
			}
			return
		}
		const maxExact = 1 << 53
		if sp.Rate() <= 0 || sp.Period() <= 0 || sp.Period() >= maxExact || sp.Burst() < 0 || sp.Penalty() < 0 || sp.Penalty() >= maxExact {
			t.Fatalf("%v accepted with Spec %+v, outside the documented bounds", lim, sp)
		}
		if want := (lim.Penalty + time.Microsecond - 1) / time.Microsecond; lim.Penalty < math.MaxInt64-1000 && sp.Penalty() != int64(want) {
			t.Fatalf("%v: Spec.Penalty %d µs, want %d (rounded up)", lim, sp.Penalty(), want)
		}

		capacity := sp.Rate()
		switch sp.Algorithm() {
		case store.GCRA, store.TokenBucket:
			capacity = sp.Burst()
		case store.LeakyBucket:
			capacity = sp.Burst() + 1
		}
		res, err := st.Take(ctx, "k", n, specs(lim)...)
		if n < 0 {
			if !errors.Is(err, store.ErrNegativeCost) {
				t.Fatalf("%v cost %d: error %v, want ErrNegativeCost", lim, n, err)
			}
			return
		}
		if err != nil {
			t.Fatalf("%v cost %d: %v", lim, n, err)
		}
		// locked: a denial with a penalty may have locked the key, and a
		// request during the lock reports the lock's RetryAfter instead.
		locked := false
		check := func(what string, res store.Result, n int64) {
			t.Helper()
			if res.Remaining < 0 || res.Remaining > res.Limit || res.ResetAfter < 0 || res.Delay < 0 {
				t.Fatalf("%v %s cost %d: %+v out of range", lim, what, n, res)
			}
			if res.Allowed && res.RetryAfter != 0 {
				t.Fatalf("%v %s cost %d: admitted with RetryAfter %v", lim, what, n, res.RetryAfter)
			}
			if !res.Allowed && res.RetryAfter <= 0 {
				t.Fatalf("%v %s cost %d: denied with RetryAfter %v", lim, what, n, res.RetryAfter)
			}
			if n > capacity && (res.Allowed || !locked && res.RetryAfter != store.InfDuration) {
				t.Fatalf("%v %s cost %d above capacity %d: %+v, want denied with InfDuration", lim, what, n, capacity, res)
			}
			if n <= capacity && n > 0 && !res.Allowed && res.RetryAfter == store.InfDuration {
				t.Fatalf("%v %s cost %d within capacity %d: denied forever", lim, what, n, capacity)
			}
		}
		check("first Take", res, n)
		locked = !res.Allowed && sp.Penalty() > 0
		if n > 0 && n <= capacity && !res.Allowed {
			t.Fatalf("%v: a fresh key denied cost %d within capacity %d: %+v", lim, n, capacity, res)
		}
		// A denial charges nothing: a peek afterwards sees the same state.
		before, err := st.Take(ctx, "k", 0, specs(lim)...)
		if err != nil {
			t.Fatal(err)
		}
		denied, err := st.Take(ctx, "k", math.MaxInt64, specs(lim)...)
		if err != nil {
			t.Fatal(err)
		}
		check("MaxInt64 Take", denied, math.MaxInt64)
		if sp.Penalty() > 0 && !locked && denied.RetryAfter != store.InfDuration {
			t.Fatalf("%v: the first denial, of cost MaxInt64, reports RetryAfter %v, want InfDuration", lim, denied.RetryAfter)
		}
		after, err := st.Take(ctx, "k", 0, specs(lim)...)
		if err != nil {
			t.Fatal(err)
		}
		if sp.Penalty() == 0 && after.Remaining != before.Remaining {
			t.Fatalf("%v: a denied MaxInt64 cost changed Remaining from %d to %d", lim, before.Remaining, after.Remaining)
		}

		// Through a Limiter, the same cost is a clean decision: never a
		// panic, never a 5xx.
		l, err := core.New(st, "test", func(*http.Request) (string, error) { return "h", nil }, []store.Limit{lim}, core.WithCost(func(*http.Request) int64 { return max(n, 0) }))
		if err != nil {
			t.Fatalf("core.New with a valid limit %v: %v", lim, err)
		}
		rec, r := httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil)
		d := l.Decide(r)
		d.Stack(r, rec.Header())
		if d.Action == core.Refuse {
			d.WriteResponse(rec)
			if rec.Code != http.StatusTooManyRequests {
				t.Fatalf("%v cost %d: refused with %d", lim, n, rec.Code)
			}
		}
	})
}
