package memorystore_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/internal/storekey"
)

// A flood through one Limiter evicts only that Limiter's states: another
// Limiter's states, fresh, exhausted or penalty-locked, all stay while it
// holds no more than its share (issue 29, item 1; pitfall 26). Before
// namespaces, the flood's exhausted (or locked) states ranked with the
// other Limiter's and, expiring later, evicted them, and its fresh states
// went first.
func TestMemoryEvictionPerLimiter(t *testing.T) {
	for _, cheap := range []store.Limit{
		{Algorithm: store.GCRA, Rate: 1, Period: time.Hour},
		{Algorithm: store.FixedWindow, Rate: 1, Period: time.Minute, Penalty: 2 * time.Hour},
	} {
		t.Run(cheap.String(), func(t *testing.T) {
			s, clock := newMemStore(memorystore.WithMaxKeys(64)) // one shard of 64
			login := store.Limit{Algorithm: store.GCRA, Rate: 5, Period: 10 * time.Minute, Penalty: time.Hour}
			loginKey := func(i int) string { return storekey.Prefix("login") + "client-" + strconv.Itoa(i) }
			// client 0 exhausted, client 1 locked, clients 2 to 9 one attempt in
			for i := range 10 {
				memTake(t, s, loginKey(i), 1, login)
			}
			for range 4 {
				memTake(t, s, loginKey(0), 1, login)
				memTake(t, s, loginKey(1), 1, login)
			}
			if r := memTake(t, s, loginKey(1), 1, login); r.Allowed {
				t.Fatalf("sixth login attempt allowed: %+v", r)
			}
			for i := range 5000 {
				if i%100 == 0 {
					clock.Advance(time.Millisecond) // the flood's states outlive the login states
				}
				k := storekey.Prefix("cheap") + "flood-" + strconv.Itoa(i)
				memTake(t, s, k, 1, cheap)
				if cheap.Penalty > 0 {
					memTake(t, s, k, 1, cheap)
				}
				if memorystore.Len(s) > 64 {
					t.Fatalf("Len = %d > 64", memorystore.Len(s))
				}
			}
			for i := range 10 {
				r := memTake(t, s, loginKey(i), 0, login)
				want := int64(4)
				if i < 2 {
					want = 0
				}
				if r.Remaining != want || (i == 1) == r.Allowed {
					t.Errorf("login client %d after the flood: %+v, want %d remaining (locked: %v)", i, r, want, i == 1)
				}
			}
		})
	}
}

// A full shard still takes a newcomer of another Limiter, at the cost of
// the Limiter holding more than its share: the newcomers of a Limiter that
// has no state are remembered, though every state is exhausted, until it
// holds its share (half the shard with two Limiters); then it evicts its
// own, and the other keeps its share.
func TestMemoryNewcomerTakesFromLargest(t *testing.T) {
	s, _ := newMemStore(memorystore.WithMaxKeys(64))
	one := store.Limit{Algorithm: store.GCRA, Rate: 1, Period: time.Hour}
	key := func(name string, i int) string { return storekey.Prefix(name) + strconv.Itoa(i) }
	for i := range 64 {
		memTake(t, s, key("a", i), 1, one)
	}
	remembered := func(name string, n int) int {
		c := 0
		for i := range n {
			if !memPeek(t, s, key(name, i), one).Allowed {
				c++
			}
		}
		return c
	}
	if got := remembered("a", 64); got != 64 || memorystore.Len(s) != 64 {
		t.Fatalf("a holds %d exhausted states of %d (Len %d), want 64", got, 64, memorystore.Len(s))
	}
	for i := range 100 {
		memTake(t, s, key("b", i), 1, one)
		if r := memTake(t, s, key("b", i), 1, one); r.Allowed {
			t.Fatalf("newcomer %d of b is not remembered: %+v", i, r)
		}
		want := 64 - min(i+1, 32)
		if got := remembered("a", 64); got != want {
			t.Fatalf("after %d newcomers of b, a holds %d states, want %d", i+1, got, want)
		}
	}
	if got := remembered("b", 100); got != 32 {
		t.Errorf("b holds %d states, want its share, 32", got)
	}
}

// A key longer than the stored maximum is stored as a digest after its
// Limiter's prefix, so it counts in its Limiter's share: a flood of long
// keys through one Limiter evicts its own states, not another's. (Counted
// as keys of no Limiter, the flood would be a third namespace, below its
// share, and take states from b.)
func TestMemoryLongKeysKeepTheirLimiter(t *testing.T) {
	s, _ := newMemStore(memorystore.WithMaxKeys(64))
	one := store.Limit{Algorithm: store.GCRA, Rate: 1, Period: time.Hour}
	long := string(make([]byte, 300))
	for i := range 32 {
		memTake(t, s, storekey.Prefix("b")+strconv.Itoa(i), 1, one)
	}
	for i := range 32 {
		memTake(t, s, storekey.Prefix("a")+strconv.Itoa(i), 1, one)
	}
	for i := range 1000 {
		memTake(t, s, storekey.Prefix("a")+long+strconv.Itoa(i), 1, one)
	}
	for i := range 32 {
		if r := memPeek(t, s, storekey.Prefix("b")+strconv.Itoa(i), one); r.Allowed {
			t.Fatalf("b's state %d was evicted by a's long keys", i)
		}
	}
	// a long key keeps its own state
	k := storekey.KeylessPrefix("a") + long
	if !memTake(t, s, k, 1, one).Allowed || memTake(t, s, k, 1, one).Allowed {
		t.Fatal("a long key of a Limiter does not keep its state")
	}
}

// memPeek is Peek of a cost of 1: whether a request would pass.
func memPeek(t testing.TB, s *memorystore.Store, key string, limits ...store.Limit) store.Result {
	t.Helper()
	res, err := s.Peek(context.Background(), key, 1, specs(limits...)...)
	if err != nil {
		t.Fatalf("Peek(%q, %v): %v", key, limits, err)
	}
	return res
}
