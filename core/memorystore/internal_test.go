package memorystore

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"
)

// White-box checks of how MemoryStore stores keys and sizes its shards.

func TestMemoryStoreKeyStorage(t *testing.T) {
	s := NewMemoryStore()
	l := Limit{Algorithm: FixedWindow, Rate: 5, Period: time.Minute}
	// A short key that is a slice of a large string must not pin it.
	big := strings.Repeat("x", 1<<20) + "client-7"
	short := big[len(big)-len("client-7"):]
	long := strings.Repeat("y", 64<<10)
	for _, key := range []string{short, long} {
		if _, err := s.Take(context.Background(), key, 1, specs(l)...); err != nil {
			t.Fatal(err)
		}
	}
	var sawShort, sawLong bool
	for i := range s.shards {
		for _, v := range s.shards[i].states {
			k := v.key
			switch {
			case !k.digest && k.key == short:
				sawShort = true
				if unsafe.StringData(k.key) == unsafe.StringData(short) {
					t.Error("the stored key shares the caller's memory")
				}
			case k.digest:
				sawLong = true
				if len(k.key) != 32 {
					t.Errorf("a 64 kB key is stored in %d bytes, want its 32-byte digest", len(k.key))
				}
			}
		}
	}
	if !sawShort || !sawLong {
		t.Fatalf("states not found: short %v, long %v", sawShort, sawLong)
	}
}

func TestMemoryStoreShardSizes(t *testing.T) {
	for _, c := range []struct{ maxKeys, shards int }{
		{1, 1}, {64, 1}, {127, 1}, {128, 2}, {1000, 8}, {1 << 14, 256}, {DefaultMaxKeys, 256}, {0, 256}, {-5, 256},
	} {
		s := NewMemoryStore(WithMaxKeys(c.maxKeys))
		want := c.maxKeys
		if want <= 0 {
			want = DefaultMaxKeys
		}
		total := 0
		for i := range s.shards {
			total += s.shards[i].capacity
		}
		if len(s.shards) != c.shards || total != want {
			t.Errorf("WithMaxKeys(%d): %d shards holding %d, want %d shards holding %d", c.maxKeys, len(s.shards), total, c.shards, want)
		}
	}
}

// The shard's cache of validated limits must never answer for a limit it
// does not hold: an invalid limit (the zero Limit looks like an empty
// entry) is rejected whatever the cache holds, and more distinct limits
// than the cache keeps each get their own state.
func TestMemoryStoreSpecCache(t *testing.T) {
	ctx := context.Background()
	s := NewMemoryStore(WithClock(func() time.Time { return time.Unix(1_000_000, 0) }))
	if unsafe.Sizeof(memoryShard{})%64 != 0 {
		t.Errorf("memoryShard is %d bytes, not a whole number of cache lines", unsafe.Sizeof(memoryShard{}))
	}
	for _, bad := range []Limit{{}, {Rate: -1, Period: time.Second}, {Algorithm: "gcra2", Rate: 1, Period: time.Second}} {
		if _, err := s.Take(ctx, "k", 1, specs(PerSecond(1))...); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Take(ctx, "k", 1, specs(bad)...); err == nil {
			t.Errorf("Take with %+v after a valid limit: no error", bad)
		}
		if _, err := s.Take(ctx, "k", 1, specs(PerSecond(1), bad)...); err == nil {
			t.Errorf("Take with PerSecond(1) and %+v: no error", bad)
		}
	}
	// Eight limits, two more than twice the cache: each admits exactly its
	// own rate, alone and all together.
	var limits []Limit
	for r := int64(1); r <= 2*specCacheSize; r++ {
		limits = append(limits, Limit{Algorithm: FixedWindow, Rate: r, Period: time.Hour})
	}
	for round := 0; round < 3; round++ {
		for _, l := range limits {
			res, err := s.Take(ctx, "single", 1, specs(l)...)
			if err != nil {
				t.Fatal(err)
			}
			want := int64(round) < l.Rate
			if res.Allowed != want || res.Limit != l.Rate {
				t.Errorf("round %d, %v: allowed %v limit %d, want %v %d", round, l, res.Allowed, res.Limit, want, l.Rate)
			}
		}
		res, err := s.Take(ctx, "many", 1, specs(limits...)...)
		if err != nil {
			t.Fatal(err)
		}
		if res.Allowed != (round == 0) || len(res.PerLimit) != len(limits) {
			t.Fatalf("round %d, all limits: allowed %v with %d results", round, res.Allowed, len(res.PerLimit))
		}
		for i, r := range res.PerLimit {
			if r.Limit != limits[i].Rate {
				t.Errorf("round %d, all limits: PerLimit[%d].Limit %d, want %d", round, i, r.Limit, limits[i].Rate)
			}
		}
	}
	// An Algorithm equal to a constant but in other memory shares the entry.
	alg := Algorithm(string([]byte("token_bucket")))
	a, _ := s.Take(ctx, "alg", 1, specs(Limit{Algorithm: alg, Rate: 2, Period: time.Hour})...)
	b, _ := s.Take(ctx, "alg", 1, specs(Limit{Algorithm: TokenBucket, Rate: 2, Period: time.Hour})...)
	if !a.Allowed || !b.Allowed || b.Remaining != 0 {
		t.Errorf("token_bucket 2/h twice, the algorithm spelled from two strings: %+v then %+v, want one state", a, b)
	}
}

// Two states whose hashes collide are both kept, found and reclaimed: the
// second lives in the overflow map.
func TestMemoryShardHashCollision(t *testing.T) {
	s := NewMemoryStore(WithMaxKeys(64))
	sh := &s.shards[0]
	sp := toAlgSpec(&Spec{Algorithm: FixedWindow, Rate: 1, Period: 1000})
	k1 := makeStateKey("a", false, &sp)
	k2 := makeStateKey("b", false, &sp)
	const h = 42
	sh.insert(&k1, h, &memoryState{words: tatState{tat: 1}.words(), has: true, expires: 100}, 0)
	sh.insert(&k2, h, &memoryState{words: tatState{tat: 2}.words(), has: true, expires: 200}, 0)
	if sh.len() != 2 || len(sh.overflow) != 1 {
		t.Fatalf("%d states, %d in overflow; want 2 and 1", sh.len(), len(sh.overflow))
	}
	for _, c := range []struct {
		k    *stateKey
		want int64
	}{{&k1, 1}, {&k2, 2}} {
		st, ok := sh.find(c.k.key, false, &sp, h)
		if !ok || st.words.tat().tat != c.want {
			t.Errorf("lookup %q: %v %+v, want a = %d", c.k.key, ok, st, c.want)
		}
	}
	k3 := makeStateKey("c", false, &sp)
	if _, ok := sh.find(k3.key, false, &sp, h); ok {
		t.Error("lookup of a key never stored found a state under the colliding hash")
	}
	// k1 lapses at 100: reclaiming (for another key) deletes it and leaves k2 findable.
	sh.reclaim(150, "c")
	if _, ok := sh.find("a", false, &sp, h); ok || sh.len() != 1 {
		t.Fatalf("after k1 lapsed: k1 found %v, %d states", ok, sh.len())
	}
	if st, ok := sh.find("b", false, &sp, h); !ok || st.words.tat().tat != 2 {
		t.Fatalf("after k1 lapsed: k2 %v %+v", ok, st)
	}
	sh.reclaim(250, "c")
	if sh.len() != 0 {
		t.Fatalf("after both lapsed: %d states", sh.len())
	}
}

// The sliding log keeps its entries in order through growth and shrinking
// of a ring buffer that has wrapped around.
func TestSlidingLogRing(t *testing.T) {
	var l slidingLog
	var want []int64 // the model: entries oldest first
	next := int64(1)
	check := func(when string) {
		t.Helper()
		if l.len() != len(want) {
			t.Fatalf("%s: %d entries, want %d", when, l.len(), len(want))
		}
		for i, w := range want {
			if got := l.at(i); got != w {
				t.Fatalf("%s: entry %d = %d, want %d", when, i, got, w)
			}
		}
		if len(want) > 0 && l.firstAfter(want[0]-1) != 0 {
			t.Fatalf("%s: firstAfter before the oldest is not 0", when)
		}
	}
	const rate = 5000
	// Grow while dropping from the front, so that growth happens with head
	// past 0 and the entries wrapped; then drain to trigger the shrinking.
	for round := 0; round < 4000; round++ {
		drop := 0
		if round%3 == 0 && len(want) > 0 {
			drop = 1
		}
		n := int64(1 + round%2)
		if len(want)-drop+int(n) > rate {
			n = 0
		}
		l.commit(drop, n, next, rate)
		want = want[drop:]
		for i := int64(0); i < n; i++ {
			want = append(want, next)
		}
		next++
		check("growing, round " + strconv.Itoa(round))
	}
	for len(want) > 1 {
		drop := min(len(want), 97)
		l.commit(drop, 1, next, rate)
		want = append(want[drop:], next)
		next++
		check("draining")
	}
	if len(l.buf) >= 1024 {
		t.Errorf("drained to %d entries, the buffer still holds %d", l.len(), len(l.buf))
	}
}

// The sliding log's copies of its oldest and newest entries follow the
// buffer through drops, appends, growth and shrinking.
func TestSlidingLogEnds(t *testing.T) {
	var l slidingLog
	next := int64(1)
	for round := 0; round < 6000; round++ {
		drop := 0
		if l.len() > 0 && (round%3 == 0 || round > 4000) {
			drop = min(l.len(), 1+round%5)
		}
		n := int64(round % 3)
		if round > 4000 {
			n = int64(round % 2)
		}
		l.commit(drop, n, next, 5000)
		next += int64(1 + round%2)
		if l.len() > 0 && (l.first != l.at(0) || l.last != l.at(l.len()-1)) {
			t.Fatalf("round %d: first %d last %d, entries %d..%d", round, l.first, l.last, l.at(0), l.at(l.len()-1))
		}
	}
}

// The shard's table finds every state it holds and no other through
// insertions, growth and removals, with hashes crowded on few home slots
// so that probes wrap and removals move states back.
func TestMemoryShardTable(t *testing.T) {
	var sh memoryShard
	model := map[uint64]*memoryState{}
	rng := uint64(1)
	next := func(n uint64) uint64 {
		rng ^= rng << 13
		rng ^= rng >> 7
		rng ^= rng << 17
		return rng % n
	}
	check := func(when string) {
		t.Helper()
		if sh.used != len(model) {
			t.Fatalf("%s: %d used, want %d", when, sh.used, len(model))
		}
		for h, st := range model {
			if got := sh.lookup(h); got != st {
				t.Fatalf("%s: lookup(%#x) = %p, want %p", when, h, got, st)
			}
		}
		for i := uint64(0); i < 8; i++ {
			if h := next(1<<24) | 1<<40; model[h] == nil && sh.lookup(h) != nil {
				t.Fatalf("%s: lookup(%#x) found a state never stored", when, h)
			}
		}
	}
	for round := 0; round < 20000; round++ {
		// Hashes whose home bits take 64 values: long probe runs.
		h := next(64)<<16 | next(1<<16)
		if st := model[h]; st != nil {
			sh.remove(st)
			delete(model, h)
		} else if len(model) < 300 {
			st := &memoryState{hash: h}
			sh.put(h, st)
			model[h] = st
		}
		if round%97 == 0 {
			check("round " + strconv.Itoa(round))
		}
	}
	check("end")
	// Sampling that never stops early visits every state, also while it
	// removes some of those it visits.
	seen := map[*memoryState]bool{}
	sh.sample(func(st *memoryState) bool {
		if model[st.hash] != st {
			t.Fatalf("visited %#x, which is not stored", st.hash)
		}
		seen[st] = true
		if st.hash%3 == 0 {
			sh.remove(st)
			delete(model, st.hash)
		}
		return false
	})
	for h, st := range model {
		if !seen[st] {
			t.Fatalf("sampling missed %#x", h)
		}
	}
	check("after sampling")
}

// A sliding log drained after a burst gives its blocks back, and one that
// grows while wrapped keeps its entries in order.
func TestSlidingLogBlocks(t *testing.T) {
	var l slidingLog
	var want []int64
	next := int64(1)
	const rate = 3000
	for round := 0; round < 20000; round++ {
		drop := 0
		if len(want) > 0 && (round%5 == 0 || round > 12000) {
			drop = min(len(want), 1+round%7)
		}
		n := int64(1 + round%3)
		if round > 12000 {
			n = int64(round % 2)
		}
		if len(want)-drop+int(n) > rate {
			n = 0
		}
		l.commit(drop, n, next, rate)
		want = want[drop:]
		for i := int64(0); i < n; i++ {
			want = append(want, next)
		}
		next++
		if l.len() != len(want) || l.cap() < len(want) {
			t.Fatalf("round %d: %d entries in a ring of %d, want %d", round, l.len(), l.cap(), len(want))
		}
		for i := range want {
			if l.at(i) != want[i] {
				t.Fatalf("round %d: entry %d = %d, want %d", round, i, l.at(i), want[i])
			}
		}
	}
	if l.cap() >= 1024 {
		t.Errorf("drained to %d entries, the ring still holds %d", l.len(), l.cap())
	}
}

// The store's hint answers only for the limit it holds: other limits, alone
// or together with it, and invalid ones take the shard's path, each with
// its own state.
func TestMemoryStoreHint(t *testing.T) {
	ctx := context.Background()
	s := NewMemoryStore(WithClock(func() time.Time { return time.Unix(1_000_000, 0) }))
	a := Limit{Algorithm: FixedWindow, Rate: 2, Period: time.Hour}
	b := Limit{Algorithm: FixedWindow, Rate: 3, Period: time.Hour}
	take := func(want bool, limits ...Limit) {
		t.Helper()
		res, err := s.Take(ctx, "k", 1, specs(limits...)...)
		if err != nil || res.Allowed != want {
			t.Fatalf("Take %v: allowed %v, %v; want %v", limits, res.Allowed, err, want)
		}
	}
	take(true, a)
	if c := s.hint.Load(); c == nil || c.limit != a {
		t.Fatalf("hint after the first Take: %+v, want %v", c, a)
	}
	take(true, a)
	take(false, a)
	for i := 0; i < 3; i++ {
		take(true, b)
	}
	take(false, b)
	take(false, a, b)
	if c := s.hint.Load(); c.limit != a {
		t.Errorf("hint moved to %v", c.limit)
	}
	if _, err := s.Take(ctx, "k", 1, specs(Limit{Algorithm: FixedWindow, Period: time.Hour})...); err == nil {
		t.Error("a zero Rate passed with a hint set")
	}
	// A caller's Algorithm in its own memory matches the hint by value.
	alg := Algorithm(string([]byte("fixed_window")))
	if res, _ := s.Take(ctx, "other", 1, specs(Limit{Algorithm: alg, Rate: 2, Period: time.Hour})...); !res.Allowed || res.Remaining != 1 {
		t.Errorf("the hint's limit spelled from another string: %+v", res)
	}
}
