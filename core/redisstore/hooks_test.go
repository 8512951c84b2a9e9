package redisstore

import (
	"fmt"
	"net/http"
	"runtime"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/store"
)

// The Limiters of a process on one Store register one reset hook in all:
// 1000 Limiters made and dropped leave no hook and no goroutine behind.
func TestLimitersShareOneResetHook(t *testing.T) {
	x := newMini(t)
	hooks := func() int {
		x.store.mu.Lock()
		defer x.store.mu.Unlock()
		return len(x.store.hooks)
	}
	before := hooks()
	key := func(*http.Request) (string, error) { return "a", nil }
	// The first Limiter may start the subscription (a few goroutines).
	if _, err := core.New(x.store, "first", key, []store.Limit{store.PerMinute(5)}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond)
	runtime.GC()
	goroutines := runtime.NumGoroutine()
	for i := 0; i < 1000; i++ {
		if _, err := core.New(x.store, fmt.Sprint("l", i), key, []store.Limit{store.PerMinute(5)}); err != nil {
			t.Fatal(err)
		}
	}
	runtime.GC()
	if n := hooks() - before; n > 1 {
		t.Errorf("1000 Limiters registered %d reset hooks, want at most 1", n)
	}
	if n := runtime.NumGoroutine(); n > goroutines {
		t.Errorf("%d goroutines after 1000 Limiters, %d before", n, goroutines)
	}
	// The hook goes with the last of them (none is kept here).
	for deadline := time.Now().Add(5 * time.Second); hooks() > before && time.Now().Before(deadline); {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	if n := hooks() - before; n != 0 {
		t.Errorf("%d reset hooks left after the Limiters were collected, want 0", n)
	}
}

// Instances counts the Stores subscribed to the reset channel, in every
// process, as soon as they subscribe.
func TestInstancesCountsSubscribedStores(t *testing.T) {
	x := newMini(t)
	client := redis.NewClient(&redis.Options{Addr: x.m.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = client.Close() })
	other, err := New(client)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Close() })
	x.store.OnReset(func(string) {})
	other.OnReset(func(string) {})
	for deadline := time.Now().Add(5 * time.Second); x.store.Instances() != 2 || other.Instances() != 2; {
		if time.Now().After(deadline) {
			t.Fatalf("Instances: %d and %d, want 2 and 2", x.store.Instances(), other.Instances())
		}
		time.Sleep(5 * time.Millisecond)
	}
}
