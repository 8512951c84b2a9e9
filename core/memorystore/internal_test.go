package memorystore

import (
	"context"
	"errors"
	"iter"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/internal/storekey"
)

// White-box checks of how Store stores keys and sizes its shards.

func TestMemoryStoreKeyStorage(t *testing.T) {
	s := New()
	l := store.Limit{Algorithm: store.FixedWindow, Rate: 5, Period: time.Minute}
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
		for v := range s.shards[i].all() {
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

// A shard fills whole cache lines, so that two shards' mutexes never
// share one; its padding is written by hand and must follow its fields.
func TestMemoryShardSize(t *testing.T) {
	if n := unsafe.Sizeof(memoryShard{}); n%64 != 0 {
		t.Fatalf("memoryShard is %d bytes, want a multiple of 64: adjust its padding", n)
	}
}

func TestMemoryStoreShardSizes(t *testing.T) {
	for _, c := range []struct{ maxKeys, shards int }{
		{1, 1}, {64, 1}, {127, 1}, {128, 2}, {1000, 8}, {1 << 14, 256}, {defaultMaxKeys, 256}, {0, 256}, {-5, 256},
	} {
		s := New(WithMaxKeys(c.maxKeys))
		want := c.maxKeys
		if want <= 0 {
			want = defaultMaxKeys
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

// The zero Spec is rejected, alone or beside a valid limit, and distinct
// limits on one key each get their own state.
func TestMemoryStoreSpecs(t *testing.T) {
	ctx := context.Background()
	s := New(WithClock(func() time.Time { return time.Unix(1_000_000, 0) }))
	if unsafe.Sizeof(memoryShard{})%64 != 0 {
		t.Errorf("memoryShard is %d bytes, not a whole number of cache lines", unsafe.Sizeof(memoryShard{}))
	}
	perSecond := store.Limit{Rate: 1, Period: time.Second}
	if _, err := s.Take(ctx, "k", 1, specs(perSecond)...); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Take(ctx, "k", 1, store.Spec{}); !errors.Is(err, store.ErrInvalidLimit) {
		t.Errorf("Take with the zero Spec after a valid limit: %v, want ErrInvalidLimit", err)
	}
	if _, err := s.Take(ctx, "k", 1, append(specs(perSecond), store.Spec{})...); !errors.Is(err, store.ErrInvalidLimit) {
		t.Errorf("Take with a valid limit and the zero store.Spec: %v, want ErrInvalidLimit", err)
	}
	// Eight limits: each admits exactly its own rate, alone and all together.
	var limits []store.Limit
	for r := int64(1); r <= 8; r++ {
		limits = append(limits, store.Limit{Algorithm: store.FixedWindow, Rate: r, Period: time.Hour})
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
}

// Two states of one shard are both kept and found, and each is reclaimed
// once it has lapsed, by an insertion for another key.
func TestMemoryShardReclaim(t *testing.T) {
	s := New(WithMaxKeys(64))
	sh := &s.shards[0]
	sp := toAlgSpec(&specs(store.Limit{Algorithm: store.FixedWindow, Rate: 1, Period: time.Millisecond})[0])
	k1 := makeStateKey("a", false, &sp)
	k2 := makeStateKey("b", false, &sp)
	sh.insert(&k1, &memoryState{words: tatState{tat: 1}.words(), has: true, expires: 100}, 0)
	sh.insert(&k2, &memoryState{words: tatState{tat: 2}.words(), has: true, expires: 200}, 0)
	if sh.len() != 2 {
		t.Fatalf("%d states, want 2", sh.len())
	}
	for _, c := range []struct {
		k    *stateKey
		want int64
	}{{&k1, 1}, {&k2, 2}} {
		st, ok := sh.find(sh.hash(c.k.key), c.k.key, false, &sp)
		if !ok || st.words.tat().tat != c.want {
			t.Errorf("lookup %q: %v %+v, want a = %d", c.k.key, ok, st, c.want)
		}
	}
	k3 := makeStateKey("c", false, &sp)
	if _, ok := sh.find(sh.hash(k3.key), k3.key, false, &sp); ok {
		t.Error("lookup of a key never stored found a state")
	}
	// k1 lapses at 100: reclaiming (for another key) deletes it and leaves k2 findable.
	sh.reclaim(150, sh.hash("c"), 0)
	if _, ok := sh.find(sh.hash("a"), "a", false, &sp); ok || sh.len() != 1 {
		t.Fatalf("after k1 lapsed: k1 found %v, %d states", ok, sh.len())
	}
	if st, ok := sh.find(sh.hash("b"), "b", false, &sp); !ok || st.words.tat().tat != 2 {
		t.Fatalf("after k1 lapsed: k2 %v %+v", ok, st)
	}
	sh.reclaim(250, sh.hash("c"), 0)
	if sh.len() != 0 {
		t.Fatalf("after both lapsed: %d states", sh.len())
	}
}

// logModel is what a sliding log must hold: its entries oldest first
// (stamp, first unit) and the next unit's number.
type logModel struct {
	entries []logEntry
	next    int64
}

// commit is slidingLog.commit on the model.
func (m *logModel) commit(drop int, n, stamp int64) {
	m.entries = m.entries[drop:]
	if n > 0 {
		m.entries = append(m.entries, logEntry{stamp: stamp, first: m.next})
		m.next += n
	}
}

// check compares l with the model: every entry, the units from each entry
// on, and the stamp of every unit.
func (m *logModel) check(t *testing.T, l *slidingLog, when string) {
	t.Helper()
	if l.len() != len(m.entries) {
		t.Fatalf("%s: %d entries, want %d", when, l.len(), len(m.entries))
	}
	for i, w := range m.entries {
		if got := l.at(i); got != w {
			t.Fatalf("%s: entry %d = %+v, want %+v", when, i, got, w)
		}
		if got := l.units(i); got != m.next-w.first {
			t.Fatalf("%s: units from entry %d = %d, want %d", when, i, got, m.next-w.first)
		}
	}
	if len(m.entries) > 0 && l.firstAfter(m.entries[0].stamp-1) != 0 {
		t.Fatalf("%s: firstAfter before the oldest is not 0", when)
	}
}

// checkStamps checks stampOf for every unit from entry start on.
func (m *logModel) checkStamps(t *testing.T, l *slidingLog, start int, when string) {
	t.Helper()
	for u := int64(0); start < len(m.entries) && u < m.next-m.entries[start].first; u++ {
		want := m.entries[start].first + u
		i := len(m.entries) - 1
		for m.entries[i].first > want {
			i--
		}
		if got := l.stampOf(start, u); got != m.entries[i].stamp {
			t.Fatalf("%s: stamp of unit %d from entry %d = %d, want %d", when, u, start, got, m.entries[i].stamp)
		}
	}
}

// The sliding log keeps its entries in order through growth and shrinking
// of a ring buffer that has wrapped around, one entry per request whatever
// its units, and finds the entry of any unit.
func TestSlidingLogRing(t *testing.T) {
	var l slidingLog
	var m logModel
	stamp := int64(1)
	const rate = 5000
	// Grow while dropping from the front, so that growth happens with head
	// past 0 and the entries wrapped; then drain to trigger the shrinking.
	for round := 0; round < 4000; round++ {
		drop := 0
		if round%3 == 0 && len(m.entries) > 0 {
			drop = 1
		}
		n := int64(1 + round%2)
		if round%7 == 0 {
			n = int64(1 + round%50)
		}
		if len(m.entries)-drop+1 > rate {
			n = 0
		}
		l.commit(drop, n, stamp, rate)
		m.commit(drop, n, stamp)
		stamp++
		m.check(t, &l, "growing, round "+strconv.Itoa(round))
		if round%97 == 0 {
			m.checkStamps(t, &l, round%(len(m.entries)+1), "growing, round "+strconv.Itoa(round))
		}
	}
	for len(m.entries) > 1 {
		drop := min(len(m.entries), 97)
		l.commit(drop, 3, stamp, rate)
		m.commit(drop, 3, stamp)
		stamp++
		m.check(t, &l, "draining")
	}
	m.checkStamps(t, &l, 0, "drained")
	if len(l.buf) >= 1024 {
		t.Errorf("drained to %d entries, the buffer still holds %d", l.len(), len(l.buf))
	}
}

// The sliding log's copies of its oldest and newest stamps follow the
// buffer through drops, appends, growth and shrinking.
func TestSlidingLogEnds(t *testing.T) {
	var l slidingLog
	stamp := int64(1)
	for round := 0; round < 6000; round++ {
		drop := 0
		if l.len() > 0 && (round%3 == 0 || round > 4000) {
			drop = min(l.len(), 1+round%5)
		}
		n := int64(round % 3)
		if round > 4000 {
			n = int64(round % 2)
		}
		l.commit(drop, n, stamp, 5000)
		stamp += int64(1 + round%2)
		if l.len() > 0 && (l.first != l.at(0).stamp || l.last != l.at(l.len()-1).stamp) {
			t.Fatalf("round %d: first %d last %d, entries %+v..%+v", round, l.first, l.last, l.at(0), l.at(l.len()-1))
		}
	}
}

// A sliding log drained after a burst gives its blocks back, and one that
// grows while wrapped keeps its entries in order.
func TestSlidingLogBlocks(t *testing.T) {
	var l slidingLog
	var m logModel
	stamp := int64(1)
	const rate = 3000
	for round := 0; round < 20000; round++ {
		drop := 0
		if len(m.entries) > 0 && (round%5 == 0 || round > 12000) {
			drop = min(len(m.entries), 1+round%7)
		}
		n := int64(1 + round%3)
		if round > 12000 {
			n = int64(round % 2)
		}
		if len(m.entries)-drop+1 > rate {
			n = 0
		}
		l.commit(drop, n, stamp, rate)
		m.commit(drop, n, stamp)
		stamp++
		if l.len() != len(m.entries) || l.cap() < len(m.entries) {
			t.Fatalf("round %d: %d entries in a ring of %d, want %d", round, l.len(), l.cap(), len(m.entries))
		}
		if round%50 == 0 || round > 19900 {
			m.check(t, &l, "round "+strconv.Itoa(round))
		}
	}
	if l.cap() >= 1024 {
		t.Errorf("drained to %d entries, the ring still holds %d", l.len(), l.cap())
	}
}

// Each shard counts the states of each namespace exactly, through
// insertions, evictions, reclaimed states, Reset and Clear, with more
// Limiters than a shard tells apart: a state's namespace is its Limiter's,
// or the shared one (0) once a shard's maxSpaces are taken, and the counts
// add up to the states held.
func TestMemorySpacesCount(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	s := New(WithMaxKeys(200), WithClock(func() time.Time { return now }))
	ctx := context.Background()
	short := specs(store.Limit{Algorithm: store.GCRA, Rate: 2, Period: time.Second})
	long := specs(store.Limit{Algorithm: store.FixedWindow, Rate: 1, Period: time.Hour})
	shared := 0 // states of a Limiter counted as no Limiter's
	check := func(step int) {
		t.Helper()
		total := 0
		for i := range s.shards {
			sh := &s.shards[i]
			if len(sh.spaces) > maxSpaces {
				t.Fatalf("step %d: shard %d tells %d namespaces apart", step, i, len(sh.spaces))
			}
			counts := make([]int, len(sh.spaces))
			for st := range sh.all() {
				counts[st.ns]++
				if name := spaceName(&st.key); st.ns != 0 && sh.spaces[st.ns].name != name {
					t.Fatalf("step %d: a state of %q counted as %q's", step, name, sh.spaces[st.ns].name)
				} else if st.ns == 0 && name != "" {
					shared++
				}
			}
			for j := range counts {
				if counts[j] != sh.spaces[j].n {
					t.Fatalf("step %d: shard %d namespace %d (%q) holds %d states, counted %d", step, i, j, sh.spaces[j].name, counts[j], sh.spaces[j].n)
				}
			}
			n := 0
			for range sh.all() {
				n++
			}
			if n != sh.len() {
				t.Fatalf("step %d: shard %d holds %d states, counted %d", step, i, n, sh.len())
			}
			total += n
		}
		if total != s.len() || total > 200 {
			t.Fatalf("step %d: %d states, Len %d", step, total, s.len())
		}
	}
	for step := range 20_000 {
		name := "limiter-" + strconv.Itoa(step%40)
		key := name + "-client-" + strconv.Itoa(step%1000)
		switch step % 5 {
		case 0:
			key = "raw-" + strconv.Itoa(step%700) // no Limiter's
		case 1:
			key = storekey.KeylessPrefix(name) + strings.Repeat("x", 300) + strconv.Itoa(step%300)
		default:
			key = storekey.Prefix(name) + key
		}
		sp := short
		if step%3 == 0 {
			sp = long
		}
		if _, err := s.Take(ctx, key, 1, sp...); err != nil {
			t.Fatal(err)
		}
		if step%97 == 0 {
			_ = s.Reset(ctx, key, sp...)
		}
		if step%10 == 0 {
			now = now.Add(100 * time.Millisecond)
		}
		if step%500 == 0 {
			check(step)
		}
	}
	check(20_000)
	if shared == 0 {
		t.Error("no state of a Limiter was counted with those of none: the shared namespace was not exercised")
	}
}

// all yields every state the shard holds. The caller holds mu.
func (sh *memoryShard) all() iter.Seq[*memoryState] {
	return func(yield func(*memoryState) bool) {
		for _, e := range sh.keys {
			if !yield(e.first) {
				return
			}
			for _, st := range e.more {
				if !yield(st) {
					return
				}
			}
		}
	}
}

// A key's several states (one per limit) are each found and removed alone,
// whichever is removed first, also by reclaim; the shard's count follows.
func TestMemoryShardKeyStates(t *testing.T) {
	for _, order := range [][]int{{0, 1, 2}, {2, 1, 0}, {1, 0, 2}, {1, 2, 0}} {
		s := New(WithMaxKeys(64))
		sh := &s.shards[0]
		var sps [3]algSpec
		var sts [3]*memoryState
		for i := range sps {
			sps[i] = toAlgSpec(&specs(store.Limit{Algorithm: store.FixedWindow, Rate: int64(i + 1), Period: time.Second})[0])
			k := makeStateKey("k", false, &sps[i])
			sh.insert(&k, &memoryState{words: tatState{tat: int64(i)}.words(), has: true, expires: 1000}, 0)
			sts[i], _ = sh.find(sh.hash("k"), "k", false, &sps[i])
		}
		if _, ok := sh.find(sh.hash("k"), "k", true, &sps[0]); ok {
			t.Fatal("the digest form of a key found the key's state")
		}
		gone := map[int]bool{}
		for _, j := range order {
			sh.remove(sts[j])
			gone[j] = true
			for i := range sps {
				st, ok := sh.find(sh.hash("k"), "k", false, &sps[i])
				if ok == gone[i] || ok && st.words.tat().tat != int64(i) {
					t.Fatalf("order %v, after removing %d: state %d found %v (%+v)", order, j, i, ok, st)
				}
			}
			if n := sh.len(); n != 3-len(gone) || len(sh.keys) != min(n, 1) {
				t.Fatalf("order %v: %d states in %d keys after %d removals", order, n, len(sh.keys), len(gone))
			}
		}
	}
	// reclaim deletes the lapsed states of a key, keeping the live one.
	s := New(WithMaxKeys(64))
	sh := &s.shards[0]
	for i, exp := range []int64{100, 300, 100} {
		sp := toAlgSpec(&specs(store.Limit{Algorithm: store.FixedWindow, Rate: int64(i + 1), Period: time.Second})[0])
		k := makeStateKey("k", false, &sp)
		sh.insert(&k, &memoryState{has: true, expires: exp}, 0)
	}
	sh.reclaim(200, sh.hash("other"), 0)
	if sh.len() != 1 || len(sh.keys) != 1 {
		t.Fatalf("after reclaim: %d states in %d keys, want 1 in 1", sh.len(), len(sh.keys))
	}
	for st := range sh.all() {
		if st.expires != 300 {
			t.Errorf("reclaim kept a state expiring at %d", st.expires)
		}
	}
}
