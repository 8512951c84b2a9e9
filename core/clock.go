package core

import (
	"fmt"
	"time"
)

// ClockOption is the option WithClock returns. It configures a Limiter
// (New) and LogDenials, so a test can hand both the same fake clock.
type ClockOption struct {
	now func() time.Time
}

// WithClock sets the clock a Limiter reads for X-RateLimit-Reset and its
// guards' horizons (SetLimits), or the clock LogDenials measures its
// repeat interval with (LogRepeatInterval). The default is time.Now. It is
// meant for tests: give the Limiter, the log observer and the memory store
// (memorystore.WithClock) the same fake clock to make every decision and
// record reproducible. A nil clock selects time.Now in LogDenials and is
// an error in New.
//
// A Redis store has no such option: it always decides by the Redis
// server's TIME.
func WithClock(now func() time.Time) ClockOption { return ClockOption{now: now} }

func (c ClockOption) applyLog(l *logConfig) { l.repeats.now = c.now }

func (c ClockOption) applyLimiter(o *options) error {
	if c.now == nil {
		return fmt.Errorf("%w: clock is nil", ErrInvalidOption)
	}
	o.l.clock = c.now
	return nil
}
