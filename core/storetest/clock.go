package storetest

import (
	"sync"
	"time"
)

// Clock is a fake clock for tests that move time: hand its Now to the
// memory store and the Limiter (memorystore.WithClock, core.WithClock), so
// that both decide by one clock, and move it with Advance. It is safe for
// concurrent use.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a Clock that reads t until moved.
func NewClock(t time.Time) *Clock { return &Clock{now: t} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock d forward (backward for a negative d).
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}
