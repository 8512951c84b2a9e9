package core_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/store"
)

func apiKey(r *http.Request) (string, error) { return r.Header.Get("X-API-Key"), nil }

func withKey(key string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.Header.Set("X-API-Key", key)
	return r
}

// Plans give each API key its plan's limits; keys of no known plan get the
// limits given to New.
func ExampleWithPlans() {
	planOf := func(r *http.Request) string {
		plan, _, _ := strings.Cut(r.Header.Get("X-API-Key"), "-")
		return plan
	}
	l, err := core.New(memorystore.New(), "test", apiKey, []store.Limit{store.PerMinute(1)},
		core.WithPlans(planOf, map[string][]store.Limit{
			"free": {store.PerMinute(2)},
			"pro":  {store.PerMinute(5)},
		}))
	if err != nil {
		panic(err)
	}
	for _, key := range []string{"free-alice", "pro-bob", "carol"} {
		served := 0
		for i := 0; i < 10; i++ {
			if l.Decide(withKey(key)).Action == core.Serve {
				served++
			}
		}
		fmt.Printf("%s: %d of 10\n", key, served)
	}
	// Output:
	// free-alice: 2 of 10
	// pro-bob: 5 of 10
	// carol: 1 of 10
}

// Status tells a client its quota as the last response's headers did, and
// whether a request would pass now, charging nothing.
func ExampleLimiter_Status() {
	l, err := core.New(memorystore.New(), "test", apiKey, []store.Limit{store.PerHour(3)})
	if err != nil {
		panic(err)
	}
	for i := 0; i < 4; i++ {
		d := l.Decide(withKey("alice"))
		fmt.Printf("request: %v, remaining %d; ", d.Action, d.Result.Remaining)
		res, _ := l.Status(withKey("alice"))
		fmt.Printf("status: remaining %d, next allowed %v\n", res.Remaining, res.Allowed)
	}
	// Output:
	// request: serve, remaining 2; status: remaining 2, next allowed true
	// request: serve, remaining 1; status: remaining 1, next allowed true
	// request: serve, remaining 0; status: remaining 0, next allowed false
	// request: refuse, remaining 0; status: remaining 0, next allowed false
}

// Reset unblocks a client locked out by a penalty.
func ExampleLimiter_Reset() {
	l, err := core.New(memorystore.New(), "test", apiKey,
		[]store.Limit{{Rate: 1, Period: time.Minute, Penalty: 15 * time.Minute}})
	if err != nil {
		panic(err)
	}
	for i := 0; i < 3; i++ {
		l.Decide(withKey("alice"))
	}
	d := l.Decide(withKey("alice"))
	fmt.Println("before:", d.Action, "retry after", d.Result.RetryAfter.Round(time.Minute))
	if err := l.Reset(context.Background(), "alice"); err != nil {
		panic(err)
	}
	fmt.Println("after:", l.Decide(withKey("alice")).Action)
	// Output:
	// before: refuse retry after 15m0s
	// after: serve
}
