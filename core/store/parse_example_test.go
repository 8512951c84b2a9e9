package store_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/store"
)

func ExampleParseLimit() {
	for _, s := range []string{"100/m", "10/s burst 20", "5000/h GCRA", "3/s leaky-bucket burst 5", "10/x"} {
		l, err := store.ParseLimit(s)
		if err != nil {
			fmt.Println(err)
			continue
		}
		fmt.Printf("%s: %d per %v, burst %d, algorithm %q\n", l, l.Rate, l.Period, l.Burst, l.Algorithm)
	}
	// Output:
	// 100/m: 100 per 1m0s, burst 0, algorithm ""
	// 10/s burst 20: 10 per 1s, burst 20, algorithm ""
	// 5000/h gcra: 5000 per 1h0m0s, burst 0, algorithm "gcra"
	// 3/s leaky_bucket burst 5: 3 per 1s, burst 5, algorithm "leaky_bucket"
	// sluice: limit "10/x": unknown period unit "x" (want s, m, h, d, a long name like "minute", or a duration like "10s")
}

// Limits can change while the Limiter serves. A limit that stays the same
// keeps the clients' state; a tightened one does not hand out a fresh
// allowance to clients that had used up the old one.
func ExampleLimiter_SetLimits() {
	now := time.Unix(1_700_000_000, 0)
	clock := func() time.Time { return now } // a fake clock, for reproducible output
	byClient := func(r *http.Request) (string, error) { return r.Header.Get("X-Client"), nil }
	parse := func(ss ...string) []store.Limit {
		out := make([]store.Limit, len(ss))
		for i, s := range ss {
			var err error
			if out[i], err = store.ParseLimit(s); err != nil {
				panic(err)
			}
		}
		return out
	}
	limiter, err := core.New(memorystore.New(memorystore.WithClock(clock)), "test", byClient, parse("10/m"), core.WithClock(clock))
	if err != nil {
		panic(err)
	}
	served := func(client string, n int) int {
		s := 0
		for range n {
			r := httptest.NewRequest("GET", "/", nil)
			r.Header.Set("X-Client", client)
			if limiter.Decide(r).Action == core.Serve {
				s++
			}
		}
		return s
	}

	fmt.Println("10/m: a served", served("a", 20), "of 20")
	if err := limiter.SetLimits(parse("5/m")); err != nil {
		panic(err)
	}
	fmt.Println("5/m:  a served", served("a", 20), "(it used up 10/m), b served", served("b", 20))
	if err := limiter.SetLimits(parse("5/m", "1000/h")); err != nil {
		panic(err)
	}
	fmt.Println("5/m and 1000/h: b served", served("b", 20), "(5/m kept its state)")
	// An invalid set is refused as a whole; the limits in force stay.
	if err := limiter.SetLimits([]store.Limit{store.PerSecond(50), {Algorithm: store.SlidingLog, Rate: 10, Period: time.Second, Burst: 3}}); err != nil {
		fmt.Println(err)
	}
	fmt.Println(limiter.Limits())
	// Output:
	// 10/m: a served 10 of 20
	// 5/m:  a served 0 (it used up 10/m), b served 5
	// 5/m and 1000/h: b served 0 (5/m kept its state)
	// limit 1: sluice: invalid limit 10/s sliding_log burst 3: sliding_log takes no burst; leave Burst 0
	// [5/m 1000/h]
}
