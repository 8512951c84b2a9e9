package core_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/store"
)

// A Limiter is usually applied by an adapter (nethttp, ginlimit,
// echolimit). This is all an adapter does with it.
func ExampleLimiter_Decide() {
	byClient := func(r *http.Request) (string, error) {
		if k := r.Header.Get("X-Client"); k != "" {
			return k, nil
		}
		return "", core.ErrNoKey
	}
	limiter, err := core.New(memorystore.New(),

		"api", byClient,
		[]store.Limit{store.PerSecond(10), store.PerHour(2)},
		core.WithPolicyNames(map[string]string{"": "api"}), core.WithHeaders(core.HeadersIETF))
	if err != nil {
		panic(err)
	}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") })

	serve := func(w http.ResponseWriter, r *http.Request) {
		d := limiter.Decide(r)
		r = d.Stack(r, w.Header()) // before the handler, on every response
		switch d.Action {
		case core.Serve:
			handler.ServeHTTP(w, r)
			return
		case core.Hold:
			if d.Wait(r.Context()) == nil {
				handler.ServeHTTP(w, r)
				return
			}
		}
		d.WriteResponse(w)
	}

	for i := 0; i < 3; i++ {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.Header.Set("X-Client", "alice")
		w := httptest.NewRecorder()
		serve(w, r)
		fmt.Println(w.Code, w.Header().Get("RateLimit"))
	}
	// Output:
	// 200 "api-0";r=9;t=1, "api-1";r=1;t=1800
	// 200 "api-0";r=8;t=1, "api-1";r=0;t=1800
	// 429 "api-0";r=8;t=1, "api-1";r=0;t=1800
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
