package redisstore

import "time"

// WithTestClock makes the deny cache read now instead of the monotonic
// clock, for tests whose Redis clock is under their control (miniredis).
func WithTestClock(now func() time.Time) Option {
	return func(s *settings) { s.clock = func() int64 { return now().UnixMicro() } }
}

// WaitListening waits until s's deny cache may answer (its listener has
// subscribed to resets); it returns at once for a Store without one.
func WaitListening(tb interface {
	Helper()
	Fatalf(string, ...any)
}, s *Store) {
	waitListening(tb, s)
}

func waitListening(tb interface {
	Helper()
	Fatalf(string, ...any)
}, s *Store) {
	tb.Helper()
	if s.deny == nil {
		return
	}
	deadline := time.Now().Add(10 * time.Second)
	for !s.deny.live.Load() {
		if time.Now().After(deadline) {
			tb.Fatalf("the deny cache's listener did not subscribe within 10s")
		}
		time.Sleep(time.Millisecond)
	}
}
