package core

import (
	"fmt"
	"time"
)

// ClockOption is the option WithClock returns. It configures both a
// MemoryStore (NewMemoryStore) and a Limiter (New), so a test can hand the
// same fake clock to both.
type ClockOption struct {
	now func() time.Time
}

// WithClock sets the clock a MemoryStore decides by, or the clock a Limiter
// reads for X-RateLimit-Reset and the circuit breaker's cooldown. The
// default is time.Now. It is meant for tests: give the store and the
// Limiter the same fake clock to make every decision reproducible. A nil
// clock selects time.Now in NewMemoryStore and is an error in New.
//
// A Redis store has no such option: it always decides by the Redis
// server's TIME.
func WithClock(now func() time.Time) ClockOption { return ClockOption{now: now} }

func (c ClockOption) applyMemory(m *memoryConfig) { m.now = c.now }

func (c ClockOption) applyLimiter(o *options) error {
	if c.now == nil {
		return fmt.Errorf("%w: clock is nil", ErrInvalidOption)
	}
	o.l.clock = c.now
	return nil
}
