package memorystore

// How a shard keeps its states: found by key and limit, bounded by its
// capacity shared among namespaces (one per Limiter), expired states
// reclaimed and, when full, one evicted by rank.

import (
	"crypto/sha256"
	"hash/maphash"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/arith"
	"github.com/sluicehq/sluice/internal/storekey"
)

// memoryShard is one lock's share of the states, padded to a cache line
// (64 bytes, TestMemoryShardSize) so neighbouring shards' mutexes do not
// contend.
type memoryShard struct {
	shardData
}

type shardData struct {
	mu       sync.Mutex
	keys     map[uint64]keyStates // the states by hash of their stored key (see hash); nil until the first state
	n        int                  // the states held
	capacity int
	seed     maphash.Seed // the Store's
	// spaces counts the states of each namespace (see WithMaxKeys) the
	// shard holds; a state holds its namespace's index. spaces[0] is the
	// namespace of keys that no Limiter built. nil until the first state.
	spaces []space
}

// space is a namespace of a shard: the name of the Limiter whose states
// it counts ("" for none), and how many the shard holds. An entry whose
// count is 0 is free for another Limiter.
type space struct {
	name string
	n    int
}

// keyStates holds the states of the stored keys of one hash: one key's,
// one per limit, but for a collision of 64-bit hashes. A map by the hash
// that chose the shard, then a scan of its few states, finds a state in
// less time than a map keyed by the key, which hashes it again and, while
// small, compares it with every key (BenchmarkMemoryStoreTake), or by the
// key and every field of the limit, whose hash and equality read them all.
type keyStates struct {
	first *memoryState   // never nil in the map
	more  []*memoryState // the others, if any
}

// stateKey identifies one state: the key (or its digest, for a long key)
// and every field that shapes the limit's arithmetic, as Spec.ID does for
// the Redis store. Its key is the shard's map key.
type stateKey struct {
	key     string
	rate    int64
	period  int64
	burst   int64
	penalty int64
	zone    string // a calendar window's zone, by name: two loads of one zone are one state
	alg     algCode
	cal     calUnit
	digest  bool // key is the SHA-256 of a key longer than maxStoredKeyLen
}

func (k *stateKey) spec() algSpec {
	sp := algSpec{alg: k.alg, rate: k.rate, period: k.period, burst: k.burst, penalty: k.penalty, cal: k.cal}
	if k.alg == algGCRA || k.alg == algLeakyBucket {
		sp.interval = arith.CeilDiv(k.period, k.rate)
	}
	return sp
}

// len returns the number of states the shard holds. The caller holds mu.
func (sh *memoryShard) len() int { return sh.n }

// hash returns the hash of a stored key, which picks its shard (see
// Store.shardOf) and its entry in the shard's map.
func (sh *memoryShard) hash(key string) uint64 { return maphash.String(sh.seed, key) }

// find returns the state of (key, digest, sp), h being the key's hash. The
// caller holds mu.
func (sh *memoryShard) find(h uint64, key string, digest bool, sp *algSpec) (*memoryState, bool) {
	e := sh.keys[h]
	if e.first != nil && e.first.key.is(key, digest, sp) {
		return e.first, true
	}
	for _, st := range e.more {
		if st.key.is(key, digest, sp) {
			return st, true
		}
	}
	return nil, false
}

// is reports whether k is the state of key, digest and sp: the fields
// makeStateKey takes from them.
func (k *stateKey) is(key string, digest bool, sp *algSpec) bool {
	return k.rate == sp.rate && k.period == sp.period && k.burst == sp.burst && k.penalty == sp.penalty &&
		k.alg == sp.alg && k.cal == sp.cal && k.digest == digest && k.key == key &&
		(k.cal == calNone || k.zone == zoneName(sp.zone)) // only a calendar window has a zone
}

// sameState reports whether a and b shape the same state of a key: the
// fields of stateKey.
func (a *algSpec) sameState(b *algSpec) bool {
	return a.alg == b.alg && a.rate == b.rate && a.period == b.period &&
		a.burst == b.burst && a.penalty == b.penalty
}

// remove deletes a stored state. The caller holds mu.
func (sh *memoryShard) remove(st *memoryState) {
	k := sh.hash(st.key.key)
	e := sh.keys[k]
	switch {
	case e.first == st && len(e.more) == 0:
		delete(sh.keys, k)
	case e.first == st:
		e.first = e.more[0]
		e.more = slices.Delete(e.more, 0, 1)
		sh.keys[k] = e
	default:
		i := slices.Index(e.more, st)
		if i < 0 {
			return // not stored
		}
		e.more = slices.Delete(e.more, i, i+1)
		sh.keys[k] = e
	}
	sh.n--
	sh.spaces[st.ns].n--
}

// spaceName returns the name of the Limiter whose states a stored key
// holds, "" for a key that no Limiter built (see storedKey).
func spaceName(k *stateKey) string {
	key := k.key
	if k.digest {
		if len(key) == sha256.Size {
			return ""
		}
		key = key[:len(key)-sha256.Size]
	}
	name, _, _ := storekey.Name(key)
	return name
}

// spaceOf returns the index of the namespace of a Limiter's name ("" for
// none) in the shard, taking a free entry for a name it does not hold; 0
// when every entry is taken. The caller holds mu.
func (sh *memoryShard) spaceOf(name string) int {
	if sh.spaces == nil {
		sh.spaces = make([]space, 1, 4)
	}
	if name == "" {
		return 0
	}
	free := 0
	for i := 1; i < len(sh.spaces); i++ {
		switch {
		case sh.spaces[i].name == name:
			return i
		case sh.spaces[i].n == 0 && free == 0:
			free = i
		}
	}
	switch {
	case free > 0:
		sh.spaces[free].name = strings.Clone(name)
	case len(sh.spaces) < maxSpaces:
		free = len(sh.spaces)
		sh.spaces = append(sh.spaces, space{name: strings.Clone(name)})
	}
	return free
}

// evictFrom returns the namespace a newcomer of namespace own evicts from
// when the shard is full: its own while it holds at least its share (the
// shard's capacity over the namespaces it holds, own included), else the
// namespace that holds the most, which holds more than its share. The
// caller holds mu.
func (sh *memoryShard) evictFrom(own int) int {
	k, most := 0, 0
	for i := range sh.spaces {
		if sh.spaces[i].n > 0 {
			k++
			if sh.spaces[i].n > sh.spaces[most].n {
				most = i
			}
		}
	}
	if sh.spaces[own].n == 0 {
		k++
	}
	if sh.spaces[own].n >= max(1, sh.capacity/k) {
		return own
	}
	return most
}

// insert adds a new entry holding a copy of st under k, whose key the
// shard keeps: a copy of the caller's (see keyCopy). It first reclaims
// expired entries among a sample of the shard and, if the shard is still
// full, evicts one. Stored states are updated in place afterwards.
func (sh *memoryShard) insert(k *stateKey, st *memoryState, now int64) {
	ns := sh.spaceOf(spaceName(k))
	h := sh.hash(k.key)
	sh.reclaim(now, h, ns)
	if sh.len() >= sh.capacity {
		// No state to evict: only this key's own states are left in the
		// namespace to evict from (a capacity below the number of limits of
		// one key), or the sample held none of its states (see WithMaxKeys).
		// The bound wins, the state is not kept.
		return
	}
	p := new(memoryState)
	*p = *st
	p.key = *k
	e := sh.keys[h]
	if e.first != nil {
		e.more = append(e.more, p)
	} else {
		e.first = p
	}
	p.ns = uint8(ns)
	if sh.keys == nil {
		sh.keys = make(map[uint64]keyStates)
	}
	sh.keys[h] = e
	sh.n++
	sh.spaces[ns].n++
}

// keyCopy returns the form of key, of hash h, a new state stores: the copy
// its key's other states hold, else a new one. Never key itself: it may be a
// slice of a larger string, or a buffer the caller reuses, and Take's key
// does not escape (a Limiter builds it on its stack). The caller holds mu.
func (sh *memoryShard) keyCopy(h uint64, key string) string {
	e := sh.keys[h]
	if e.first != nil && e.first.key.key == key {
		return e.first.key.key
	}
	for _, st := range e.more {
		if st.key.key == key {
			return st.key.key
		}
	}
	return strings.Clone(key)
}

// reclaim deletes the expired entries among a sample of the shard (the
// first ones of a range over its map, which starts at a random place)
// and, when the shard is full, evicts the sampled live entry that is
// cheapest to forget (see evictionRank) of the namespace evictFrom names
// for a newcomer of namespace own: the sample then goes on until it holds
// evictionSample entries of that namespace, or evictionScan entries in
// all. Entries of hash h, the key's, are never touched: its states are
// being written by the current call.
func (sh *memoryShard) reclaim(now int64, h uint64, own int) {
	var (
		victim     *memoryState
		victimRank evictionRank
		sampled    int
		seen       int // live entries of the namespace to evict from
	)
	full := sh.len() >= sh.capacity
	from := -1
	if full {
		from = sh.evictFrom(own)
	}
scan:
	for k, e := range sh.keys {
		if k == h {
			continue
		}
		// e is a copy: removing a state rewrites the map's entry and moves
		// the later states of e.more down, which the scan, from the last
		// to first, has passed.
		for i := len(e.more) - 1; i >= -1; i-- {
			v := e.first
			if i >= 0 {
				v = e.more[i]
			}
			sampled++
			switch {
			case now >= v.expires:
				sh.remove(v)
				full = sh.len() >= sh.capacity
			case full && int(v.ns) == from:
				seen++
				if r := rankForEviction(&v.key, v, now); victim == nil || r.less(victimRank) {
					victim, victimRank = v, r
				}
			}
			if sampled >= evictionSample && (!full || seen >= evictionSample || sampled >= evictionScan) {
				break scan
			}
		}
	}
	if victim != nil && sh.len() >= sh.capacity {
		sh.remove(victim)
	}
}

// evictionRank orders live entries by how much forgetting them would give
// away: the share of the allowance they hold, then how long they last.
type evictionRank struct {
	used    float64 // share of the limit in use; 2 while a penalty lock holds
	expires int64
}

func (r evictionRank) less(o evictionRank) bool {
	return r.used < o.used || (r.used == o.used && r.expires < o.expires)
}

func rankForEviction(k *stateKey, st *memoryState, now int64) evictionRank {
	r := evictionRank{expires: st.expires}
	if st.locked && now < st.lockUntil {
		r.used = 2
		return r
	}
	sp := k.spec()
	sp.zone = st.zone
	var o outcome
	evaluateAlgorithm(&o, &sp, st, now, 0)
	if o.limit > 0 {
		r.used = float64(o.limit-o.remain) / float64(o.limit)
	}
	return r
}

// zoneName is the name a calendar window's zone is stored under ("" for
// none).
func zoneName(z *time.Location) string {
	if z == nil {
		return ""
	}
	return z.String()
}
