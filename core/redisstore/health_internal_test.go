package redisstore

import (
	"context"
	"testing"
	"time"
)

// A timed-out call counts against its server only when the server had a
// fair try: sent with at least half of its time left, its end noticed
// soon after the deadline (5 ms, or a fifth of its time: 40 ms here, so
// that a busy machine running this test late does not change the cases). Calls that waited for a starved process do not
// open the breaker; the same calls sent in time do.
func TestBreakerCountsOnlyFairTries(t *testing.T) {
	const timeout = 200 * time.Millisecond
	for _, c := range []struct {
		name     string
		sentLate time.Duration // after the call was made
		noticed  time.Duration // after the deadline
		opens    bool
	}{
		{"sent at once, noticed at the deadline", 0, 0, true},
		{"sent with 60% left", 80 * time.Millisecond, time.Millisecond, true},
		{"sent with 30% left", 140 * time.Millisecond, 0, false},
		{"sent with 2 ms left", 198 * time.Millisecond, 0, false},
		{"noticed 4 ms late", 0, 4 * time.Millisecond, true},
		{"noticed 100 ms late", 0, 100 * time.Millisecond, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			h := newHealth(nil, 2, time.Hour, nil)
			defer h.close()
			n := h.whole
			for i := 0; i < 3; i++ {
				now := monoMicros()
				start := now - (timeout + c.noticed).Microseconds()
				ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-c.noticed))
				n.report(ctx, context.DeadlineExceeded, start, start+c.sentLate.Microseconds())
				cancel()
				// The next call is made after this one was reported.
				time.Sleep(timeout + c.noticed + time.Millisecond)
			}
			if got := n.isOpen.Load(); got != c.opens {
				t.Errorf("breaker open %v after three timeouts, want %v", got, c.opens)
			}
		})
	}
}
