package core_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/core/storetest"
)

// byClient is the key function of these examples: the X-Client header.
// Package keyfuncs has the real ones (client IP, API key, JWT claim).
func byClient(r *http.Request) (string, error) {
	if k := r.Header.Get("X-Client"); k != "" {
		return k, nil
	}
	return "", core.ErrNoKey
}

// request returns a GET / from client ("" for none).
func request(client string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	if client != "" {
		r.Header.Set("X-Client", client)
	}
	return r
}

// deadRedis returns a Redis store whose server is gone: every call to
// Redis fails (connection refused), and its local fallback decides unless
// the Limiter's failure policy says otherwise.
func deadRedis() *redisstore.Store {
	client := redis.NewUniversalClient(redisstore.UniversalOptions("127.0.0.1:1"))
	st, err := redisstore.New(client)
	if err != nil {
		panic(err)
	}
	return st
}

func ExampleNew() {
	limiter, err := core.New(memorystore.New(),

		"search", byClient,
		[]store.Limit{
			{Algorithm: store.GCRA, Rate: 10, Period: time.Second, Burst: 20},
			{Algorithm: store.SlidingLog, Rate: 1000, Period: time.Hour},
		},
	)
	if err != nil {
		panic(err)
	}
	fmt.Println(len(limiter.Limits()), "limits")

	// Every limit is validated; at least one is required.
	_, err = core.New(memorystore.New(), "test", byClient, []store.Limit{{Rate: 10}})
	fmt.Println(errors.Is(err, store.ErrInvalidLimit))
	_, err = core.New(memorystore.New(), "test", byClient, nil)
	fmt.Println(errors.Is(err, store.ErrInvalidLimit))
	// Output:
	// 2 limits
	// true
	// true
}

func ExampleWithHeaders() {
	now := time.Unix(1_700_000_000, 0)
	clock := func() time.Time { return now }
	limiter, err := core.New(memorystore.New(memorystore.WithClock(clock)),

		"api", byClient,
		[]store.Limit{{Algorithm: store.FixedWindow, Rate: 100, Period: time.Minute}},
		core.WithClock(clock), core.WithPolicyNames(map[string]string{"": "api"}), core.WithHeaders(core.HeadersLegacy|core.HeadersIETF))
	if err != nil {
		panic(err)
	}
	h, r := http.Header{}, request("alice")
	limiter.Decide(r).Stack(r, h)
	for _, name := range []string{"X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset", "Ratelimit-Policy", "Ratelimit"} {
		fmt.Printf("%s: %s\n", name, h.Get(name))
	}
	// Output:
	// X-Ratelimit-Limit: 100
	// X-Ratelimit-Remaining: 99
	// X-Ratelimit-Reset: 1700000040
	// Ratelimit-Policy: "api";q=100;w=60
	// Ratelimit: "api";r=99;t=40
}

// A LeakyBucket limit holds requests instead of refusing them: the adapter
// waits Decision.Delay, then serves. A client that goes away meanwhile gets
// the unavailable response.
func ExampleDecision_Wait() {
	now := time.Unix(1_700_000_000, 0)
	clock := func() time.Time { return now }
	limiter, err := core.New(memorystore.New(memorystore.WithClock(clock)), "test", byClient,
		[]store.Limit{{Algorithm: store.LeakyBucket, Rate: 2, Period: time.Second, Burst: 1}}, core.WithClock(clock))
	if err != nil {
		panic(err)
	}
	for i := 0; i < 3; i++ {
		d := limiter.Decide(request("alice"))
		fmt.Println(d.Action, d.Outcome, d.Delay)
	}

	limiter.Decide(request("bob"))
	held := limiter.Decide(request("bob"))
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the client has gone
	fmt.Println(held.Wait(ctx), held.Response().Status)
	// Output:
	// serve allowed 0s
	// hold delayed 500ms
	// refuse denied 0s
	// context canceled 503
}

// Shadow mode decides and counts as usual, but serves everything: watch
// the observer (or the metrics fed by it) before enforcing a new limit.
func ExampleWithShadow() {
	denied := 0
	limiter, err := core.New(memorystore.New(), "test", byClient, []store.Limit{store.PerMinute(2)},
		core.WithShadow(),
		core.WithObserver(func(e core.Event) {
			if e.Outcome == core.OutcomeShadowDenied {
				denied++
			}
		}))
	if err != nil {
		panic(err)
	}
	for i := 0; i < 5; i++ {
		fmt.Println(limiter.Decide(request("alice")).Action)
	}
	fmt.Println("would have denied:", denied)
	// Output:
	// serve
	// serve
	// serve
	// serve
	// serve
	// would have denied: 3
}

// Observers see every decision: here a log line for each refusal.
func ExampleWithObserver() {
	now := time.Unix(1_700_000_000, 0)
	clock := func() time.Time { return now }
	limiter, err := core.New(memorystore.New(memorystore.WithClock(clock)),
		"upload", byClient, []store.Limit{store.PerMinute(1)},
		core.WithClock(clock), core.WithPolicyNames(map[string]string{"": "upload"}),
		core.WithObserver(func(e core.Event) {
			if e.Action == core.Refuse {
				fmt.Printf("limiter=%s key=%s outcome=%s retry=%v\n", e.Limiter, e.Key, e.Outcome, e.Result.RetryAfter)
			}
		}))
	if err != nil {
		panic(err)
	}
	limiter.Decide(request("alice"))
	limiter.Decide(request("alice"))
	// Output:
	// limiter=upload key=alice outcome=denied retry=1m0s
}

// When Redis is down, the failure policy decides: the Redis store's local
// fallback (the default), serve everything, or refuse everything.
func ExampleWithFailurePolicy() {
	st := deadRedis()
	defer st.Close()
	for _, p := range []core.FailurePolicy{core.FailLocal, core.FailOpen, core.FailClosed} {
		limiter, err := core.New(st, fmt.Sprint("policy", p), byClient, []store.Limit{store.PerMinute(1)},
			core.WithFailurePolicy(p))
		if err != nil {
			panic(err)
		}
		fmt.Printf("%-11s", []string{"local", "open", "closed"}[p])
		for i := 0; i < 2; i++ {
			d := limiter.Decide(request("alice"))
			fmt.Printf(" %s/%s", d.Action, d.Outcome)
		}
		fmt.Println()
	}
	// Output:
	// local       serve/fallback refuse/fallback
	// open        serve/failed_open serve/failed_open
	// closed      refuse/failed_closed refuse/failed_closed
}

// Requests without a key can share one bucket (the default), be refused,
// or be served unlimited.
func ExampleWithKeyErrorRule() {
	limiter, err := core.New(memorystore.New(), "test", byClient, []store.Limit{store.PerMinute(10)},
		core.WithKeyErrorRule(core.KeyErrorDeny, nil))
	if err != nil {
		panic(err)
	}
	d := limiter.Decide(request(""))
	w := httptest.NewRecorder()
	d.WriteResponse(w)
	fmt.Println(d.Action, d.Outcome, w.Code, w.Body.String())
	// Output:
	// refuse key_error 403 {"error":"forbidden"}
}

// Some requests cost more than others: a bulk request charges one unit per
// item.
func ExampleWithCost_perRequest() {
	limiter, err := core.New(memorystore.New(), "test", byClient, []store.Limit{store.PerMinute(10)},
		core.WithCost(func(r *http.Request) int64 {
			if r.URL.Query().Has("bulk") {
				return 4
			}
			return 1
		}))
	if err != nil {
		panic(err)
	}
	for _, target := range []string{"/", "/?bulk", "/?bulk", "/?bulk", "/"} {
		r := httptest.NewRequest(http.MethodGet, target, nil)
		r.Header.Set("X-Client", "alice")
		d := limiter.Decide(r)
		fmt.Println(target, d.Action, d.Result.Remaining)
	}
	// Output:
	// / serve 9
	// /?bulk serve 5
	// /?bulk serve 1
	// /?bulk refuse 1
	// / serve 0
}

// Health checks and allow-listed clients skip the limiter entirely.
func ExampleWithSkip() {
	limiter, err := core.New(memorystore.New(), "test", byClient, []store.Limit{store.PerMinute(1)},
		core.WithSkip(func(r *http.Request) bool { return r.URL.Path == "/healthz" }))
	if err != nil {
		panic(err)
	}
	for _, path := range []string{"/healthz", "/healthz", "/healthz", "/"} {
		r := httptest.NewRequest(http.MethodGet, path, nil)
		r.Header.Set("X-Client", "alice")
		d := limiter.Decide(r)
		fmt.Println(path, d.Action, d.Outcome)
	}
	// Output:
	// /healthz serve skipped
	// /healthz serve skipped
	// /healthz serve skipped
	// / serve allowed
}

// Two routes limited per client with the same limits: their names keep
// their allowances apart on one store.
func ExampleNew_names() {
	mem := memorystore.New()
	search, err := core.New(mem, "search", byClient, []store.Limit{store.PerMinute(1)})
	if err != nil {
		panic(err)
	}
	upload, err := core.New(mem, "upload", byClient, []store.Limit{store.PerMinute(1)})
	if err != nil {
		panic(err)
	}
	fmt.Println(search.Decide(request("alice")).Action, upload.Decide(request("alice")).Action)
	fmt.Println(search.Decide(request("alice")).Action, upload.Decide(request("alice")).Action)
	// Output:
	// serve serve
	// refuse refuse
}

// Every request of this route costs 5 units of the limit.
func ExampleWithCost() {
	limiter, err := core.New(memorystore.New(), "test", byClient, []store.Limit{store.PerMinute(12)}, core.WithCost(func(*http.Request) int64 { return 5 }))
	if err != nil {
		panic(err)
	}
	for i := 0; i < 3; i++ {
		d := limiter.Decide(request("alice"))
		fmt.Println(d.Action, d.Result.Remaining)
	}
	// Output:
	// serve 7
	// serve 2
	// refuse 2
}

// Without a key, requests share one bucket by default: anonymous clients
// are limited together, never skipped.
func ExampleKeyErrorRule() {
	limiter, err := core.New(memorystore.New(), "test", byClient, []store.Limit{store.PerMinute(2)},
		core.WithObserver(func(e core.Event) {
			fmt.Println(e.Outcome, errors.Is(e.KeyErr, core.ErrNoKey))
		}))
	if err != nil {
		panic(err)
	}
	for i := 0; i < 3; i++ {
		limiter.Decide(request(""))
	}
	// Output:
	// allowed true
	// allowed true
	// denied true
}

// A test hands one fake clock to the memory store and the Limiter (the
// option WithClock returns is both's), so that every figure, X-RateLimit-Reset
// included, is reproducible. Here the clock is a number the test moves.
func ExampleWithClock() {
	clock := storetest.NewClock(time.Unix(1_700_000_000, 0)) // one fake clock for the store and the Limiter
	limiter, err := core.New(memorystore.New(memorystore.WithClock(clock.Now)), "api", byClient,
		[]store.Limit{store.PerMinute(2)}, core.WithClock(clock.Now))
	if err != nil {
		panic(err)
	}
	for i := 0; i < 4; i++ {
		if i == 3 {
			clock.Advance(30 * time.Second) // one unit back
		}
		h, r := http.Header{}, request("alice")
		d := limiter.Decide(r)
		d.Stack(r, h)
		fmt.Printf("%v remaining=%s reset=%s retry-after=%q\n", d.Action, h.Get("X-Ratelimit-Remaining"), h.Get("X-Ratelimit-Reset"), h.Get("Retry-After"))
	}
	// Output:
	// serve remaining=1 reset=1700000030 retry-after=""
	// serve remaining=0 reset=1700000060 retry-after=""
	// refuse remaining=0 reset=1700000060 retry-after="30"
	// serve remaining=0 reset=1700000090 retry-after=""
}
