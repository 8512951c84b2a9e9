package redisstore

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/core/store"
)

// WithTestClock makes the deny cache read now instead of the monotonic
// clock, and calendar windows' boundaries be computed around now instead
// of time.Now, for tests whose Redis clock is under their control
// (miniredis).
func WithTestClock(now func() time.Time) Option {
	return optionFunc(func(s *settings) { s.clock, s.wall = func() int64 { return now().UnixMicro() }, now })
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

// BreakerState names the state of the breaker of the server that holds
// key's state under limit: "closed" or "open".
func BreakerState(s *Store, key string, limit Limit) string {
	c, err := s.takeCall(key, 1, specs(limit), false)
	if err != nil {
		panic(err)
	}
	keys, _ := c.keysArgs()
	if s.health.nodeFor(context.Background(), keys[0]).isOpen.Load() {
		return "open"
	}
	return "closed"
}

// WithProbeCheck replaces a probe's test of the server, for tests that
// hold a probe while Redis answers.
func WithProbeCheck(check func(context.Context) error) Option {
	return optionFunc(func(s *settings) {
		s.check = func(ctx context.Context, _ redis.UniversalClient) error { return check(ctx) }
	})
}

// Limit is store.Limit, for BreakerState's callers.
type Limit = store.Limit

// PipeStats is pipeStats, for the external tests.
func PipeStats(s *Store) (pipelined, resent int64) { return pipeStats(s) }

// WaitPipeBusy waits until n calls hold the slots of s's pipelines (sent,
// their replies awaited).
func WaitPipeBusy(tb interface {
	Helper()
	Fatalf(string, ...any)
}, s *Store, n int) {
	tb.Helper()
	busy := func() int {
		total := 0
		s.health.each(func(nd *node) {
			if nd.pipe != nil {
				nd.pipe.mu.Lock()
				total += nd.pipe.busy
				nd.pipe.mu.Unlock()
			}
		})
		return total
	}
	deadline := time.Now().Add(10 * time.Second)
	for busy() != n {
		if time.Now().After(deadline) {
			tb.Fatalf("%d pipeline slots busy after 10s, want %d", busy(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TakeSource is the take script's source, for tests outside the package.
var TakeSource = takeSource

// CountClears counts the resets of everything ("") the Store hands to its
// fallback from now on.
func CountClears(s *Store) *atomic.Int64 {
	var n atomic.Int64
	tell := *s.tell.Load()
	counting := func(key string) {
		if key == "" {
			n.Add(1)
		}
		tell(key)
	}
	s.tell.Store(&counting)
	return &n
}

// WaitPendingClear waits until the Store holds back such a reset: it has
// subscribed again while a breaker was open.
func WaitPendingClear(tb interface {
	Helper()
	Fatalf(string, ...any)
}, s *Store, within time.Duration) {
	tb.Helper()
	deadline := time.Now().Add(within)
	for !s.pendingClear.Load() {
		if time.Now().After(deadline) {
			tb.Fatalf("the Store did not subscribe again (with a breaker open) within %v", within)
		}
		time.Sleep(time.Millisecond)
	}
}

// DefaultTimeout is the Store's deadline for a call to Redis by default.
const DefaultTimeout = defaultTimeout

// bare is the options of a Store without deadline nor fallback, whose
// calls show what Redis does: the tests' default (later options win).
func bare() []Option { return []Option{WithFallback(nil), WithTimeout(0)} }

// Bare is bare for tests outside the package.
func Bare() []Option { return bare() }

// The breaker's defaults, for tests outside the package.
const (
	DefaultBreakerFailures = defaultBreakerFailures
	DefaultBreakerCooldown = defaultBreakerCooldown
)

// WithTestLogger sets the logger of the Store's warnings and breaker
// events (slog.Default() otherwise).
func WithTestLogger(l *slog.Logger) Option {
	return optionFunc(func(s *settings) { s.log = l })
}

// AgeBreakers makes every open breaker of s look open for d longer.
func AgeBreakers(s *Store, d time.Duration) {
	s.health.each(func(n *node) { n.openedAt.Add(-d.Microseconds()) })
}

// The lean scripts, their sources and the algorithm codes by family, for
// the tests (families holds them).
var (
	tatScript     = families[store.GCRA].script // LeakyBucket's too
	tokenScript   = families[store.TokenBucket].script
	fixedScript   = families[store.FixedWindow].script
	slidingScript = families[store.SlidingWindow].script
	logScript     = families[store.SlidingLog].script

	tatSource, tatBatch         = tatScript.src.(string), tatScript.batch.src.(string)
	tokenSource, tokenBatch     = tokenScript.src.(string), tokenScript.batch.src.(string)
	fixedSource, fixedBatch     = fixedScript.src.(string), fixedScript.batch.src.(string)
	slidingSource, slidingBatch = slidingScript.src.(string), slidingScript.batch.src.(string)
	logSource, logBatch         = logScript.src.(string), logScript.batch.src.(string)

	codeGCRA        = families[store.GCRA].code
	codeLeakyBucket = families[store.LeakyBucket].code
	codeSlidingLog  = families[store.SlidingLog].code
)

// splitOfSpecs is splitOf of limits as takeCall prepares them.
func (s *Store) splitOfSpecs(key string, limits []store.Spec) *split {
	ps := make([]*prepared, len(limits))
	for i, l := range limits {
		ps[i], _ = s.prepare(l)
	}
	return s.splitOf(key, ps)
}
