package redisstore

import (
	"fmt"
	"net/http"
	"runtime"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/internal/redistest"
)

// Limiters start nothing: 1000 of them on one Store leave the goroutine
// count unchanged (the Store's subscription is its own, from New).
func TestLimitersStartNoGoroutine(t *testing.T) {
	x := newMini(t)
	key := func(*http.Request) (string, error) { return "a", nil }
	if _, err := core.New(x.store, "first", key, []store.Limit{store.PerMinute(5)}); err != nil {
		t.Fatal(err)
	}
	// The count before: once what the Store and the first Limiter started
	// has settled (the same on two looks in a row).
	last := -1
	steady := func() bool {
		n := runtime.NumGoroutine()
		same := n == last
		last = n
		return same
	}
	if !redistest.WaitUntil(5*time.Second, steady) {
		t.Fatalf("the goroutine count did not settle within 5 s (%d)", last)
	}
	goroutines := last
	for i := 0; i < 1000; i++ {
		if _, err := core.New(x.store, fmt.Sprint("l", i), key, []store.Limit{store.PerMinute(5)}); err != nil {
			t.Fatal(err)
		}
	}
	if n := runtime.NumGoroutine(); n > goroutines {
		t.Errorf("%d goroutines after 1000 Limiters, %d before", n, goroutines)
	}
}

// instanceCount counts the Stores subscribed to the reset channel, in
// every process, as soon as they subscribe (with the fallback on, from New).
func TestInstancesCountsSubscribedStores(t *testing.T) {
	x := newMini(t, WithFallback(memorystore.New()))
	client := redis.NewClient(&redis.Options{Addr: x.m.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = client.Close() })
	other, err := New(client)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Close() })
	for deadline := time.Now().Add(5 * time.Second); x.store.instanceCount() != 2 || other.instanceCount() != 2; {
		if time.Now().After(deadline) {
			t.Fatalf("instanceCount: %d and %d, want 2 and 2", x.store.instanceCount(), other.instanceCount())
		}
		time.Sleep(5 * time.Millisecond)
	}
}
