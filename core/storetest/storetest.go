package storetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/store"
)

// KeyTTL is one key held by a store's backend and its remaining lifetime.
type KeyTTL struct {
	Key string
	// TTL is how long the key has left; negative means it never expires.
	TTL time.Duration
}

// Harness connects the suite to one Store implementation on one backend.
// NewStore is required; every other field is optional and enables more of
// the suite when set. A Harness is used by one Run at a time.
type Harness struct {
	// NewStore returns a store on the backend under test. Each call should
	// return a new instance sharing the backend's state (a new client on the
	// same Redis); a store without a shared backend may return the same
	// instance every time. The suite alternates between two instances.
	NewStore func(tb testing.TB) store.Store

	// Now and Advance, when both are set, give the suite full control of the
	// store's clock: Now returns it and Advance moves it forward by d
	// (including the expiry of stored keys). The clock must not move
	// otherwise. Every figure is then asserted exactly, and the long,
	// time-driven cases run too.
	//
	// When they are nil the store runs on this machine's wall clock (the
	// Redis TIME of a local server is that clock): the suite sleeps, asserts
	// every duration within the lateness it measured, runs SeedBoundaryBurst
	// at a tenth of its size, and skips Bounds (pseudo-random traffic whose
	// guarantees are checked on exact times).
	Now     func() time.Time
	Advance func(tb testing.TB, d time.Duration)

	// Keys, when set, returns every key the backend holds, with its TTL
	// (Redis: SCAN and PTTL on every master). Keys that have expired must
	// not be listed. The suite then checks that every write sets a TTL, that
	// the TTLs are the ones ALGORITHMS.md prescribes, and that nothing is
	// left once they lapse. Keys of other tests may be present: the suite
	// only judges keys that appear while it runs.
	Keys func(tb testing.TB) []KeyTTL

	// FlushScripts, when set, drops the backend's script cache (Redis:
	// SCRIPT FLUSH on every node); the suite calls it between Takes and
	// expects every figure to stay the same.
	FlushScripts func(tb testing.TB)

	// Light, when set, runs the heaviest cases at a tenth of their size,
	// for a backend where a Take costs about a millisecond (miniredis
	// starts a Lua interpreter per script call): SeedBoundaryBurst becomes
	// 100 per 3 s with traffic 1, 1, 98, 90, 10, 0; Concurrency two
	// instances × 50 goroutines for an allowance of 25; Bounds 200 requests.
	Light bool
}

// Run runs the conformance suite against h as subtests of t. A store passes
// when it implements ALGORITHMS.md exactly; see the package documentation
// for what is covered.
func Run(t *testing.T, h Harness) {
	t.Helper()
	if h.NewStore == nil {
		t.Fatal("storetest: Harness.NewStore is required")
	}
	if (h.Now == nil) != (h.Advance == nil) {
		t.Fatal("storetest: set both Harness.Now and Harness.Advance, or neither")
	}
	s := &suite{h: h, exact: h.Advance != nil}
	t.Run("BadInput", s.testBadInput)
	t.Run("Isolation", s.testIsolation)
	t.Run("Algorithms", func(t *testing.T) { s.testScenarios(t, false) })
	t.Run("ScriptFlush", func(t *testing.T) {
		if h.FlushScripts == nil {
			t.Skip("Harness.FlushScripts is nil")
		}
		s.testScenarios(t, true)
	})
	t.Run("Reset", s.testReset)
	t.Run("InFlight", s.testInFlight)
	t.Run("Refund", s.testRefund)
	t.Run("Concurrency", s.testConcurrency)
	t.Run("TTL", s.testTTL)
	t.Run("SeedBoundaryBurst", s.testSeed)
	t.Run("Bounds", s.testBounds)
	t.Run("NoImmortalKeys", s.testNoImmortalKeys)
}

type suite struct {
	h     Harness
	exact bool
}

// newKey returns a key no other test uses.
func newKey(tb testing.TB) string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		tb.Fatalf("random key: %v", err)
	}
	return "storetest:" + hex.EncodeToString(b[:])
}

// stores returns two store instances on the same backend.
func (s *suite) stores(tb testing.TB) [2]store.Store {
	return [2]store.Store{s.h.NewStore(tb), s.h.NewStore(tb)}
}

// warmUp makes a peek through each store on a throwaway key, so that
// connecting and loading scripts do not count as lateness in what follows.
func warmUp(tb testing.TB, limits []store.Limit, stores ...store.Store) {
	for _, st := range stores {
		if _, err := take(tb, st, "storetest:warm-up", 0, limits...); err != nil {
			tb.Fatalf("warming up the store: %v", err)
		}
	}
}

// take calls st.Take with a deadline, turning a panic into a test failure.
func take(tb testing.TB, st store.Store, key string, n int64, limits ...store.Limit) (res store.Result, err error) {
	tb.Helper()
	defer func() {
		if p := recover(); p != nil {
			tb.Errorf("Take(%q, %d, %v) panicked: %v", key, n, limits, p)
			err = fmt.Errorf("panic: %v", p)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return st.Take(ctx, key, n, specs(limits)...)
}

// specs converts limits to the Specs a store receives. An invalid Limit
// becomes the zero Spec, which a store must reject as it rejected invalid
// Limits before the contract passed Specs.
func specs(limits []store.Limit) []store.Spec {
	if limits == nil {
		return nil
	}
	out := make([]store.Spec, len(limits))
	for i, l := range limits {
		out[i], _ = l.Spec() // the zero Spec on error
	}
	return out
}

// mustTake is take that fails the test on an error.
func mustTake(tb testing.TB, st store.Store, key string, n int64, limits ...store.Limit) store.Result {
	tb.Helper()
	res, err := take(tb, st, key, n, limits...)
	if err != nil {
		tb.Fatalf("Take(%q, %d, %v): %v", key, n, limits, err)
	}
	return res
}

// advance moves the store's clock by d: the harness's clock when exact,
// a sleep otherwise.
func (s *suite) advance(tb testing.TB, d time.Duration) {
	if d <= 0 {
		return
	}
	if s.exact {
		s.h.Advance(tb, d)
		return
	}
	time.Sleep(d)
}

// align moves the clock to offset past a multiple of period since the Unix
// epoch (the next such instant, or now if it is one), and returns the
// reference instant on the monotonic clock: when not exact, the wall-clock
// moment that was aimed at, which has passed.
func (s *suite) align(tb testing.TB, period, offset time.Duration) time.Time {
	if period <= 0 {
		return time.Now()
	}
	if s.exact {
		now := s.h.Now().UnixMicro()
		p, o := period.Microseconds(), offset.Microseconds()
		wait := ((o-now%p)%p + p) % p
		s.h.Advance(tb, time.Duration(wait)*time.Microsecond)
		return time.Now()
	}
	now := time.Now()
	p, o := int64(period), int64(offset)
	wait := ((o-now.UnixNano()%p)%p + p) % p
	if wait < int64(time.Millisecond) { // too close to aim at reliably
		wait += p
	}
	target := now.Add(time.Duration(wait)) // carries the monotonic reading
	time.Sleep(time.Until(target))
	return target
}

// fmtDur prints a duration, InfDuration as "INF".
func fmtDur(d time.Duration) string {
	if d == store.InfDuration {
		return "INF"
	}
	return d.String()
}

func fmtResult(r store.Result) string {
	var b strings.Builder
	if r.Allowed {
		b.WriteString("allowed")
	} else {
		b.WriteString("denied")
	}
	fmt.Fprintf(&b, " limit=%d remaining=%d retry=%s reset=%s delay=%s",
		r.Limit, r.Remaining, fmtDur(r.RetryAfter), fmtDur(r.ResetAfter), fmtDur(r.Delay))
	if r.PerLimit != nil || r.Binding != 0 {
		fmt.Fprintf(&b, " binding=%d", r.Binding)
	}
	for i, p := range r.PerLimit {
		fmt.Fprintf(&b, "\n\t\t[%d] %s", i, fmtResult(p))
	}
	return b.String()
}

// diffResult lists how got differs from want. Durations may differ by tol
// (the measured lateness of a wall-clock run); zero and InfDuration are
// always exact.
func diffResult(got, want store.Result, tol time.Duration) []string {
	var d []string
	if got.Allowed != want.Allowed {
		d = append(d, fmt.Sprintf("Allowed=%v, want %v", got.Allowed, want.Allowed))
	}
	if got.Limit != want.Limit {
		d = append(d, fmt.Sprintf("Limit=%d, want %d", got.Limit, want.Limit))
	}
	if got.Remaining != want.Remaining {
		d = append(d, fmt.Sprintf("Remaining=%d, want %d", got.Remaining, want.Remaining))
	}
	durs := []struct {
		name      string
		got, want time.Duration
	}{
		{"RetryAfter", got.RetryAfter, want.RetryAfter},
		{"ResetAfter", got.ResetAfter, want.ResetAfter},
		{"Delay", got.Delay, want.Delay},
	}
	for _, x := range durs {
		if !durEqual(x.got, x.want, tol) {
			if tol > 0 && x.want != 0 && x.want != store.InfDuration {
				d = append(d, fmt.Sprintf("%s=%s, want %s ± %s", x.name, fmtDur(x.got), fmtDur(x.want), tol))
			} else {
				d = append(d, fmt.Sprintf("%s=%s, want %s", x.name, fmtDur(x.got), fmtDur(x.want)))
			}
		}
	}
	if got.Binding != want.Binding {
		d = append(d, fmt.Sprintf("Binding=%d, want %d", got.Binding, want.Binding))
	}
	switch {
	case len(got.PerLimit) != len(want.PerLimit):
		d = append(d, fmt.Sprintf("len(PerLimit)=%d, want %d", len(got.PerLimit), len(want.PerLimit)))
	default:
		for i := range want.PerLimit {
			for _, s := range diffResult(got.PerLimit[i], want.PerLimit[i], tol) {
				d = append(d, fmt.Sprintf("PerLimit[%d].%s", i, s))
			}
		}
	}
	return d
}

func durEqual(got, want, tol time.Duration) bool {
	if want == 0 || want == store.InfDuration || got == store.InfDuration {
		return got == want
	}
	diff := got - want
	if diff < 0 {
		diff = -diff
	}
	return diff <= tol
}
