package redisstore

import "time"

// WithTestClock makes the deny cache read now instead of the monotonic
// clock, for tests whose Redis clock is under their control (miniredis).
func WithTestClock(now func() time.Time) Option {
	return func(s *settings) { s.clock = func() int64 { return now().UnixMicro() } }
}
