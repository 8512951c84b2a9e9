package storetest_test

import (
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/core/storetest"
)

// fakeClock moves only when the suite advances it.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(_ testing.TB, d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// A store's test builds a Harness and passes it to Run. Here: the
// memory store on a clock the suite controls, so every figure is exact. A
// Redis store would also set Keys (SCAN and PTTL) and FlushScripts.
func ExampleRun() {
	clock := &fakeClock{now: time.Unix(1_700_000_000, 0)}
	mem := memorystore.New(memorystore.WithClock(clock.Now))
	h := storetest.Harness{
		NewStore: func(testing.TB) store.Store { return mem },
		Now:      clock.Now,
		Advance:  clock.Advance,
	}
	// In a test function: storetest.Run(t, h)
	_ = h
}
