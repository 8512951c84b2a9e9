package redisstore_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/internal/redistest"
)

func clientKey(r *http.Request) (string, error) { return r.Header.Get("X-Client"), nil }

func requestFrom(client string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.Header.Set("X-Client", client)
	return r
}

// instance is one process of a service: its own client, Store and Limiter.
func instance(t *testing.T, addr string, limits []store.Limit, opts ...redisstore.Option) *core.Limiter {
	t.Helper()
	client := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = client.Close() })
	rs, err := redisstore.New(client, append([]redisstore.Option{redisstore.WithTimeout(10 * time.Second)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rs.Close() })
	redisstore.WaitListening(t, rs)
	l, err := core.New(rs, "api", clientKey, limits)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// Two instances on one real Redis, each with its own client and Store:
// a client exhausted through both and locked for 15 minutes is unblocked
// by a Reset through one, at once in that one and within a second in the
// other, with the deny caches on or off, and also when the other's
// subscription was just killed (it must not answer from a cache that may
// have missed the reset).
func TestRedisResetAcrossInstances(t *testing.T) {
	srv := redistest.StartServer(t)
	admin := srv.Client(t)
	limits := []store.Limit{{Algorithm: store.FixedWindow, Rate: 5, Period: time.Hour, Penalty: 15 * time.Minute}, store.PerMinute(100)}
	for _, c := range []struct {
		name string
		deny int
		kill bool
	}{
		{"no deny cache", 0, false},
		{"deny cache", 4096, false},
		{"deny cache, subscription killed", 4096, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			var opts []redisstore.Option
			if c.deny > 0 {
				opts = append(opts, redisstore.WithDenyCache(c.deny))
			}
			a, b := instance(t, srv.Addr, limits, opts...), instance(t, srv.Addr, limits, opts...)
			client := "user-" + c.name
			for i := 0; i < 8; i++ {
				for _, l := range []*core.Limiter{a, b} {
					l.Decide(requestFrom(client))
				}
			}
			for _, l := range []*core.Limiter{a, b} {
				if d := l.Decide(requestFrom(client)); d.Action != core.Refuse || d.Result.RetryAfter < 14*time.Minute {
					t.Fatalf("exhausted client: %v %+v, want locked for 15m", d.Outcome, d.Result)
				}
			}
			if c.kill {
				if err := admin.Do(context.Background(), "CLIENT", "KILL", "TYPE", "pubsub").Err(); err != nil {
					t.Fatal(err)
				}
			}
			start := time.Now()
			if err := a.Reset(context.Background(), client); err != nil {
				t.Fatal(err)
			}
			if d := a.Decide(requestFrom(client)); d.Action != core.Serve {
				t.Errorf("the instance that reset: %v %+v, want served", d.Outcome, d.Result)
			}
			tries := 0
			for {
				tries++
				d := b.Decide(requestFrom(client))
				if d.Action == core.Serve {
					if d.Result.Remaining != 3 {
						t.Errorf("other instance after Reset: remaining %d, want 3", d.Result.Remaining)
					}
					break
				}
				if time.Since(start) > time.Second {
					t.Fatalf("the other instance still refuses 1s after Reset: %v %+v", d.Outcome, d.Result)
				}
				time.Sleep(time.Millisecond)
			}
			t.Logf("other instance served %v after Reset returned, on try %d", time.Since(start).Round(time.Microsecond), tries)
		})
	}
}

// The README's testing pattern: with the default configuration, a test
// that exhausts a client and moves miniredis' clock sees the client
// allowed again, for every algorithm.
func TestMiniredisMovingTime(t *testing.T) {
	for _, a := range store.Algorithms() {
		t.Run(string(a), func(t *testing.T) {
			m := miniredis.RunT(t)
			m.SetTime(time.Now())
			client := redis.NewClient(&redis.Options{Addr: m.Addr()})
			t.Cleanup(func() { _ = client.Close() })
			rs, err := redisstore.New(client)
			if err != nil {
				t.Fatal(err)
			}
			l, err := core.New(rs, "test", clientKey, []store.Limit{{Algorithm: a, Rate: 2, Period: time.Minute}})
			if err != nil {
				t.Fatal(err)
			}
			served, capacity := 0, int64(0)
			for i := 0; i < 5; i++ {
				d := l.Decide(requestFrom("alice"))
				if d.Action != core.Refuse {
					served++
				}
				capacity = d.Result.Limit
			}
			if int64(served) != capacity || capacity < 2 {
				t.Fatalf("%d of 5 served, want the capacity %d", served, capacity)
			}
			m.FastForward(2 * time.Minute)
			m.SetTime(time.Now().Add(2 * time.Minute))
			if d := l.Decide(requestFrom("alice")); d.Action == core.Refuse {
				t.Errorf("after moving miniredis 2 minutes on: %v %+v, want served", d.Outcome, d.Result)
			}
		})
	}
}
