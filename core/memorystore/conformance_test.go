package memorystore_test

import (
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/core/storetest"
)

// conformanceClock is a fake clock that moves only when told to.
type conformanceClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *conformanceClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *conformanceClock) Advance(_ testing.TB, d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// TestMemoryStoreConformance runs the conformance suite on the memory store
// whose clock only the suite moves, so every figure is checked exactly.
// The memory store lists no keys, so the suite's TTL checks do not apply.
func TestMemoryStoreConformance(t *testing.T) {
	// Deliberately not on a window boundary: the suite aligns where needed.
	clock := &conformanceClock{now: time.Unix(1_700_000_000, 123_457_000)}
	mem := memorystore.New(memorystore.WithClock(clock.Now))
	storetest.Run(t, storetest.Harness{
		NewStore: func(testing.TB) store.Store { return mem },
		Now:      clock.Now,
		Advance:  clock.Advance,
	})
}
