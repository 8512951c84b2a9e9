package storetest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/store"
)

// inFlight is core.MaxInFlight's Limit, built here so that the suite
// states the Limit a store receives.
func inFlight(n int64, hold time.Duration) store.Limit {
	return store.Limit{Algorithm: store.InFlight, Rate: n, Period: hold}
}

// testInFlight holds the store to the InFlight algorithm of ALGORITHMS.md:
// slots taken concurrently, released, expired, and combined with a rate
// limit in one atomic decision.
func (s *suite) testInFlight(t *testing.T) {
	t.Run("Concurrent", s.testInFlightConcurrent)
	t.Run("Release", s.testInFlightRelease)
	t.Run("Expiry", s.testInFlightExpiry)
	t.Run("Atomic", s.testInFlightAtomic)
	t.Run("TTL", s.testInFlightTTL)
}

// testInFlightConcurrent: 20 concurrent Takes through two instances on one
// key admit exactly n = 3, each with its own slot; the others are refused
// with Remaining 0 and a RetryAfter of at most InFlightRetryAfter.
func (s *suite) testInFlightConcurrent(t *testing.T) {
	l := inFlight(3, 10*time.Second)
	key, stores := newKey(t), s.stores(t)
	warmUp(t, []store.Limit{l}, stores[:]...)
	results := make([]store.Result, 20)
	var wg sync.WaitGroup
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = mustTake(t, stores[i%2], key, 1, l)
		}()
	}
	wg.Wait()
	slots := map[int64]bool{}
	for i, r := range results {
		switch {
		case r.Allowed && (r.Slot == 0 || slots[r.Slot]):
			t.Errorf("take %d: allowed with slot %d, want a new nonzero id (taken: %v)", i, r.Slot, slots)
		case r.Allowed:
			slots[r.Slot] = true
		case r.Slot != 0 || r.Remaining != 0 || r.Limit != 3 || r.RetryAfter <= 0 || r.RetryAfter > time.Second:
			t.Errorf("take %d: %s slot=%d, want denied limit=3 remaining=0 retry in (0, 1s], slot 0", i, fmtResult(r), r.Slot)
		}
	}
	if len(slots) != 3 {
		t.Errorf("%d of 20 concurrent takes admitted, want 3", len(slots))
	}
	if s.exact {
		want := deny(3, 0, time.Second, 10*time.Second)
		if d := diffResult(mustTake(t, stores[0], key, 1, l), want, 0); len(d) > 0 {
			t.Errorf("take 21: %v", d)
		}
	}
}

// release calls st's Release, failing the test when the call fails.
func release(tb testing.TB, st store.Store, key string, slot int64, limits ...store.Limit) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := st.Release(ctx, key, slot, specs(limits)...); err != nil {
		tb.Fatalf("Release(%q, %d): %v", key, slot, err)
	}
}

// testInFlightRelease: a released slot is free at once, through the other
// instance; releasing it again, or an id never taken, changes nothing; a
// peek and a Take of any cost see and take what ALGORITHMS.md says.
func (s *suite) testInFlightRelease(t *testing.T) {
	l := inFlight(2, 10*time.Second)
	key, st := newKey(t), s.stores(t)
	a := mustTake(t, st[0], key, 1, l)
	b := mustTake(t, st[1], key, 5, l) // any cost takes one slot
	if !a.Allowed || !b.Allowed || a.Remaining != 1 || b.Remaining != 0 || a.Slot == b.Slot {
		t.Fatalf("two takes of 2 slots: %s slot %d; %s slot %d", fmtResult(a), a.Slot, fmtResult(b), b.Slot)
	}
	if r := mustTake(t, st[0], key, 0, l); !r.Allowed || r.Remaining != 0 || r.Slot != 0 {
		t.Errorf("peek when full: %s slot %d, want allowed remaining=0 slot 0", fmtResult(r), r.Slot)
	}
	if r := mustTake(t, st[0], key, 1, l); r.Allowed {
		t.Fatalf("third take of 2 slots: %s, want denied", fmtResult(r))
	}
	release(t, st[1], key, a.Slot, l)
	release(t, st[0], key, a.Slot, l)   // again: nothing more
	release(t, st[0], key, a.Slot+7, l) // never taken (ids from one clock differ by less): nothing
	c := mustTake(t, st[0], key, 1, l)
	if !c.Allowed || c.Remaining != 0 || c.Slot == 0 || c.Slot == b.Slot {
		t.Errorf("take after a release: %s slot %d, want allowed remaining=0 and a slot other than %d", fmtResult(c), c.Slot, b.Slot)
	}
	if r := mustTake(t, st[1], key, 1, l); r.Allowed {
		t.Errorf("take after a release was taken again: %s, want denied", fmtResult(r))
	}
	release(t, st[0], key, b.Slot, l)
	release(t, st[1], key, c.Slot, l)
	if r := mustTake(t, st[1], key, 0, l); r.Remaining != 2 || r.ResetAfter != 0 {
		t.Errorf("peek after every release: %s, want remaining=2 reset=0", fmtResult(r))
	}
}

// testInFlightExpiry: a slot never released (its holder vanished) is free
// again once its hold has passed, not before.
func (s *suite) testInFlightExpiry(t *testing.T) {
	hold := 10 * time.Second
	if !s.exact {
		hold = 400 * time.Millisecond
	}
	l := inFlight(2, hold)
	key, st := newKey(t), s.stores(t)
	warmUp(t, []store.Limit{l}, st[:]...)
	start := time.Now()
	for i := range 2 {
		if r := mustTake(t, st[i], key, 1, l); !r.Allowed {
			t.Fatalf("take %d of 2 slots: %s", i, fmtResult(r))
		}
	}
	if s.exact {
		s.advance(t, hold/2)
		want := deny(2, 0, time.Second, hold/2)
		if d := diffResult(mustTake(t, st[0], key, 1, l), want, 0); len(d) > 0 {
			t.Errorf("at hold/2: %v", d)
		}
		s.advance(t, hold/2-ms)
		want = deny(2, 0, ms, ms)
		if d := diffResult(mustTake(t, st[1], key, 1, l), want, 0); len(d) > 0 {
			t.Errorf("1ms before the hold ends: %v", d)
		}
		s.advance(t, ms)
	} else {
		r := mustTake(t, st[0], key, 1, l)
		if time.Since(start) < hold && r.Allowed {
			t.Errorf("take within the hold: %s, want denied", fmtResult(r))
		}
		time.Sleep(hold + 20*ms)
	}
	if r := mustTake(t, st[1], key, 1, l); !r.Allowed || r.Remaining != 1 {
		t.Errorf("take after the hold: %s, want allowed remaining=1 (both slots expired)", fmtResult(r))
	}
}

// testInFlightAtomic: with a rate limit in the same Take, a refusal by
// either charges neither.
func (s *suite) testInFlightAtomic(t *testing.T) {
	st := s.stores(t)
	rate := store.Limit{Algorithm: store.TokenBucket, Rate: 10, Period: time.Hour}
	// The rate refuses: no slot is taken.
	key := newKey(t)
	one := store.Limit{Algorithm: store.TokenBucket, Rate: 1, Period: time.Hour}
	l := inFlight(5, 10*time.Second)
	if r := mustTake(t, st[0], key, 1, l, one); !r.Allowed || r.Slot == 0 {
		t.Fatalf("first take: %s slot %d, want allowed with a slot", fmtResult(r), r.Slot)
	}
	if r := mustTake(t, st[1], key, 1, l, one); r.Allowed || r.Binding != 1 || r.Slot != 0 {
		t.Fatalf("second take: %s slot %d, want denied by the rate (binding 1), no slot", fmtResult(r), r.Slot)
	}
	if r := mustTake(t, st[0], key, 0, l); r.Remaining != 4 {
		t.Errorf("slots after a refusal by the rate: remaining %d, want 4 (only the first take's slot)", r.Remaining)
	}
	// The in-flight limit refuses: the rate is not charged.
	key = newKey(t)
	l = inFlight(1, 10*time.Second)
	if r := mustTake(t, st[0], key, 1, l, rate); !r.Allowed {
		t.Fatalf("first take: %s", fmtResult(r))
	}
	for i := range 3 {
		if r := mustTake(t, st[i%2], key, 1, l, rate); r.Allowed || r.Binding != 0 {
			t.Fatalf("take %d while the slot is taken: %s, want denied by the in-flight limit", i+2, fmtResult(r))
		}
	}
	if r := mustTake(t, st[1], key, 0, rate); r.Remaining != 9 {
		t.Errorf("rate after 3 refusals by the in-flight limit: remaining %d, want 9 (only the first take charged)", r.Remaining)
	}
}

// testInFlightTTL: every key an InFlight Take leaves expires within the
// hold (needs Harness.Keys).
func (s *suite) testInFlightTTL(t *testing.T) {
	if s.h.Keys == nil {
		t.Skip("Harness.Keys is nil")
	}
	hold := 3 * time.Second
	before := s.keySet(t)
	st := s.h.NewStore(t)
	key := newKey(t)
	mustTake(t, st, key, 1, inFlight(2, hold))
	ks := s.newKeys(t, before)
	if len(ks) == 0 {
		t.Fatal("an admitted in-flight Take left no key")
	}
	for _, k := range ks {
		if k.TTL <= 0 || k.TTL > hold {
			t.Errorf("key %s: want a TTL in (0, %v]", fmtKeys([]KeyTTL{k}), hold)
		}
	}
}
