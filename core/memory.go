package core

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash/maphash"
	"strings"
	"sync"
	"time"
)

// DefaultMaxKeys is the number of states a MemoryStore holds at most unless
// WithMaxKeys says otherwise.
const DefaultMaxKeys = 1 << 20

const (
	// maxMemoryShards is the most shards a MemoryStore splits into.
	maxMemoryShards = 256
	// minShardCapacity is the fewest states a shard is sized for: a small
	// WithMaxKeys gets fewer shards rather than tiny ones.
	minShardCapacity = 64
	// evictionSample is how many entries of its shard an insertion looks
	// at, to reclaim expired ones and to choose a victim when full.
	evictionSample = 8
	// maxStoredKeyLen is the longest key stored as is; longer keys are
	// stored as their SHA-256 digest.
	maxStoredKeyLen = 256
)

// errNilMemoryStore is returned by the methods of a MemoryStore not made by
// NewMemoryStore.
var errNilMemoryStore = errors.New("sluice: MemoryStore is nil or its zero value; create it with NewMemoryStore")

// MemoryStore is a Store that keeps rate-limit state in the memory of the
// process. It implements every Algorithm with exactly the integer
// arithmetic of the Redis store (ALGORITHMS.md), at the clock given by
// WithMemoryClock (by default time.Now, read once per Take, in
// microseconds). It suits a single process, tests, and the fallback of a
// Limiter whose shared store is unreachable; processes do not share it.
//
// Each (key, limit) pair is one state. Their number never exceeds the bound
// set by WithMaxKeys (DefaultMaxKeys). A SlidingLog state also holds one
// timestamp per admitted unit in its trailing Period, at most the limit's
// Rate. Keys longer than 256 bytes are stored as their SHA-256 digest, so a
// flood of huge keys costs no more memory than one of short keys.
//
// State whose lifetime has passed behaves exactly like no state and is
// reclaimed incrementally: every insertion of a new state looks at a few
// entries of its shard and deletes the expired ones; nothing ever sweeps
// all keys. When the shard is still full, the insertion evicts the sampled
// state holding the smallest share of its allowance (of those, the one that
// expires soonest). A flood of fresh keys therefore evicts fresh,
// nearly-full-allowance state, which costs little to forget, and not a
// client's exhausted or penalty-locked state: a client cannot regain its
// allowance by making the store forget it, short of spending a full
// allowance on each key of the flood.
//
// A MemoryStore is safe for concurrent use by multiple goroutines. Its
// states are split into shards by a hash of the key, each behind its own
// mutex; every limit of one key lives in the same shard, so a Take over
// several limits is atomic, and decisions on one shard are made in the
// order of their clock readings.
//
// The zero value is not usable: create a MemoryStore with NewMemoryStore.
// Take on a nil or zero MemoryStore returns an error rather than panic.
type MemoryStore struct {
	now    func() time.Time
	seed   maphash.Seed
	shards []memoryShard
	mask   uint64
}

// memoryShard is one lock's share of the states, padded to a cache line so
// neighbouring shards' mutexes do not contend.
type memoryShard struct {
	mu       sync.Mutex
	states   map[stateKey]*memoryState
	capacity int
	_        [40]byte
}

// stateKey identifies one state: the key (or its digest, for a long key)
// and every field that shapes the limit's arithmetic, as Spec.ID does for
// the Redis store. It is comparable, so a lookup allocates nothing.
type stateKey struct {
	key     string
	rate    int64
	period  int64
	burst   int64
	penalty int64
	alg     algCode
	digest  bool // key is the SHA-256 of a key longer than maxStoredKeyLen
}

func (k *stateKey) spec() algSpec {
	sp := algSpec{alg: k.alg, rate: k.rate, period: k.period, burst: k.burst, penalty: k.penalty}
	if k.alg == algGCRA || k.alg == algLeakyBucket {
		sp.interval = ceilDiv(k.period, k.rate)
	}
	return sp
}

// MemoryOption configures a MemoryStore.
type MemoryOption func(*memoryConfig)

type memoryConfig struct {
	now     func() time.Time
	maxKeys int
}

// WithMemoryClock sets the clock the store decides by; nil selects
// time.Now. Tests pass a fake clock to make every decision reproducible.
// (It is not named WithClock: that is the Limiter's option.)
func WithMemoryClock(now func() time.Time) MemoryOption {
	return func(c *memoryConfig) { c.now = now }
}

// WithMaxKeys bounds the number of states the store holds (one per key and
// limit); n ≤ 0 selects DefaultMaxKeys. The bound is split evenly among the
// shards (up to 256, each sized for at least 64 states when n allows), so a
// shard that hashing fills more than others evicts before the store as a
// whole holds n states. Keep n far above the number of limits one Take
// uses: when a shard is too small to hold them all, the states that do not
// fit are not kept.
func WithMaxKeys(n int) MemoryOption {
	return func(c *memoryConfig) { c.maxKeys = n }
}

// NewMemoryStore returns an empty MemoryStore.
func NewMemoryStore(opts ...MemoryOption) *MemoryStore {
	cfg := memoryConfig{now: time.Now, maxKeys: DefaultMaxKeys}
	for _, opt := range opts {
		if opt != nil {
			opt(&cfg)
		}
	}
	if cfg.now == nil {
		cfg.now = time.Now
	}
	if cfg.maxKeys <= 0 {
		cfg.maxKeys = DefaultMaxKeys
	}
	shards := 1
	for shards < maxMemoryShards && cfg.maxKeys/(2*shards) >= minShardCapacity {
		shards *= 2
	}
	s := &MemoryStore{
		now:    cfg.now,
		seed:   maphash.MakeSeed(),
		shards: make([]memoryShard, shards),
		mask:   uint64(shards - 1),
	}
	for i := range s.shards {
		s.shards[i].states = make(map[stateKey]*memoryState)
		s.shards[i].capacity = cfg.maxKeys / shards
		if i < cfg.maxKeys%shards {
			s.shards[i].capacity++
		}
	}
	return s
}

// Len returns the number of states the store holds, expired ones not yet
// reclaimed included. It is meant for tests and metrics.
func (s *MemoryStore) Len() int {
	if s == nil {
		return 0
	}
	total := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		total += len(sh.states)
		sh.mu.Unlock()
	}
	return total
}

// Take charges n against every limit for key, atomically, and reports the
// decision (see Store and Combine). All limits are evaluated at one instant
// against the state before the call; either every limit allows and every
// one is charged, or nothing is charged except the penalty locks of the
// limits that denied. n == 0 peeks: it is decided like any request and
// writes nothing.
//
// Take returns an error wrapping ErrEmptyKey, ErrNegativeCost, ErrNoLimits
// or ErrInvalidLimit for bad input, and ctx's error when ctx is already
// done; otherwise it never fails and never blocks beyond a short critical
// section. With one limit and a key it has seen before it allocates nothing.
func (s *MemoryStore) Take(ctx context.Context, key string, n int64, limits ...Limit) (Result, error) {
	if s == nil || s.shards == nil {
		return Result{}, errNilMemoryStore
	}
	if key == "" {
		return Result{}, fmt.Errorf("%w: Take needs a key identifying the client", ErrEmptyKey)
	}
	if n < 0 {
		return Result{}, fmt.Errorf("%w: n = %d", ErrNegativeCost, n)
	}
	if len(limits) == 0 {
		return Result{}, fmt.Errorf("%w: Take needs at least one limit", ErrNoLimits)
	}
	if ctx != nil {
		if err := ctx.Err(); err != nil {
			return Result{}, fmt.Errorf("sluice: memory store: %w", err)
		}
	}
	if len(limits) == 1 {
		return s.takeOne(key, n, limits[0])
	}
	return s.takeMany(key, n, limits)
}

// storedKey returns the form a key is stored under: itself, or for a key
// longer than maxStoredKeyLen its SHA-256 digest, so a flood of huge keys
// cannot hold more than a few dozen bytes per state.
func storedKey(key string) (string, bool) {
	if len(key) <= maxStoredKeyLen {
		return key, false
	}
	sum := sha256.Sum256([]byte(key))
	return string(sum[:]), true
}

func makeStateKey(key string, digest bool, sp *Spec) stateKey {
	return stateKey{
		key: key, digest: digest, alg: algCodeOf(sp.Algorithm),
		rate: sp.Rate, period: sp.Period, burst: sp.Burst, penalty: sp.Penalty,
	}
}

func toAlgSpec(sp *Spec) algSpec {
	return algSpec{
		alg: algCodeOf(sp.Algorithm), rate: sp.Rate, period: sp.Period,
		burst: sp.Burst, penalty: sp.Penalty, interval: sp.Interval,
	}
}

func (s *MemoryStore) shardOf(key string) *memoryShard {
	return &s.shards[maphash.String(s.seed, key)&s.mask]
}

func (s *MemoryStore) takeOne(key string, n int64, limit Limit) (Result, error) {
	spec, err := limit.Spec()
	if err != nil {
		return Result{}, err
	}
	key, digest := storedKey(key)
	k := makeStateKey(key, digest, &spec)
	sp := toAlgSpec(&spec)
	var o outcome
	sh := s.shardOf(key)
	s.decideOne(sh, &k, &sp, n, &o)
	return o.result(), nil
}

func (s *MemoryStore) decideOne(sh *memoryShard, k *stateKey, sp *algSpec, n int64, o *outcome) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	now := s.now().UnixMicro()
	var fresh memoryState
	st, found := sh.states[*k]
	if !found {
		st = &fresh
	}
	evaluate(o, sp, st, now, n)
	switch {
	case o.allowed && n > 0:
		apply(st, o, sp, n)
	case !o.allowed && !o.byLock && sp.penalty > 0:
		lock(st, sp, now)
	default:
		return
	}
	if !found {
		sh.insert(k, st, now)
	}
}

// limitEval is the scratch of one limit in a Take over several.
type limitEval struct {
	k stateKey // with an empty key: the call's key is kept apart so
	// that it does not escape along with the scratch's states
	sp    algSpec
	st    *memoryState // the stored state; nil when absent
	fresh memoryState  // the state of an absent entry
	found bool
	dup   bool // the same state as an earlier limit of this call
	o     outcome
}

// state returns the limit's state: the stored one, or fresh when absent.
// (Storing &e.fresh in e.st would move the scratch to the heap.)
func (e *limitEval) state() *memoryState {
	if e.st != nil {
		return e.st
	}
	return &e.fresh
}

func (s *MemoryStore) takeMany(key string, n int64, limits []Limit) (Result, error) {
	var scratch [4]limitEval
	evs := scratch[:0]
	if len(limits) > len(scratch) {
		evs = make([]limitEval, 0, len(limits))
	}
	key, digest := storedKey(key)
	for i := range limits {
		spec, err := limits[i].Spec()
		if err != nil {
			return Result{}, fmt.Errorf("limits[%d]: %w", i, err)
		}
		evs = append(evs, limitEval{k: makeStateKey("", digest, &spec), sp: toAlgSpec(&spec)})
	}
	for i := range evs {
		for j := 0; j < i; j++ {
			if evs[j].k == evs[i].k {
				evs[i].dup = true
				break
			}
		}
	}
	s.decideMany(s.shardOf(key), key, evs, n)
	perLimit := make([]Result, len(evs))
	for i := range evs {
		perLimit[i] = evs[i].o.result()
	}
	return Combine(perLimit), nil
}

func (s *MemoryStore) decideMany(sh *memoryShard, key string, evs []limitEval, n int64) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	now := s.now().UnixMicro()
	allowed := true
	for i := range evs {
		e := &evs[i]
		k := e.k
		k.key = key
		e.st, e.found = sh.states[k]
		evaluate(&e.o, &e.sp, e.state(), now, n)
		allowed = allowed && e.o.allowed
	}
	for i := range evs {
		e := &evs[i]
		switch {
		case allowed:
			if n == 0 || e.dup {
				continue
			}
			apply(e.state(), &e.o, &e.sp, n)
		case e.o.allowed:
			// Not charged: report what a peek sees.
			evaluate(&e.o, &e.sp, e.state(), now, 0)
			continue
		case !e.o.byLock && e.sp.penalty > 0 && !e.dup:
			lock(e.state(), &e.sp, now)
		default:
			continue
		}
		if !e.found {
			k := e.k
			k.key = key
			sh.insert(&k, &e.fresh, now)
		}
	}
}

// insert adds a new entry holding a copy of st. It first reclaims expired
// entries among a sample of the shard and, if the shard is still full,
// evicts one. Stored states are updated in place afterwards: assigning to
// an existing map key would also rewrite the key, pinning the caller's
// string.
func (sh *memoryShard) insert(k *stateKey, st *memoryState, now int64) {
	sh.reclaim(now, k.key)
	if len(sh.states) >= sh.capacity {
		// Only this key's own states are left (a capacity below the number
		// of limits of one key): the bound wins, the state is not kept.
		return
	}
	stored := stateKey{
		// A copy: the caller's key may be a slice of a larger string.
		key:  strings.Clone(k.key),
		rate: k.rate, period: k.period, burst: k.burst, penalty: k.penalty,
		alg: k.alg, digest: k.digest,
	}
	p := new(memoryState)
	*p = *st
	sh.states[stored] = p
}

// reclaim deletes the expired entries among a sample of the shard (map
// iteration starts at a random entry) and, when the shard is full, evicts
// the sampled live entry that is cheapest to forget (see evictionRank).
// Entries of key are never touched: their states are being written by the
// current call.
func (sh *memoryShard) reclaim(now int64, key string) {
	var (
		victim     stateKey
		victimRank evictionRank
		haveVictim bool
		sampled    int
	)
	for k, v := range sh.states {
		if k.key == key {
			continue
		}
		sampled++
		if now >= v.expires {
			delete(sh.states, k)
		} else if len(sh.states) >= sh.capacity {
			if r := rankForEviction(&k, v, now); !haveVictim || r.less(victimRank) {
				victim, victimRank, haveVictim = k, r, true
			}
		}
		if sampled >= evictionSample && (haveVictim || len(sh.states) < sh.capacity) {
			break
		}
	}
	if haveVictim && len(sh.states) >= sh.capacity {
		delete(sh.states, victim)
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
	var o outcome
	evaluateAlgorithm(&o, &sp, st, now, 0)
	if o.limit > 0 {
		r.used = float64(o.limit-o.remain) / float64(o.limit)
	}
	return r
}

// result converts an outcome's µs figures into a Result.
func (o *outcome) result() Result {
	return Result{
		Allowed:    o.allowed,
		Limit:      o.limit,
		Remaining:  o.remain,
		RetryAfter: micros(o.retry),
		ResetAfter: micros(o.reset),
		Delay:      micros(o.delay),
	}
}

// micros converts µs to a Duration; infMicros (and anything that would
// overflow) becomes InfDuration.
func micros(us int64) time.Duration {
	if us >= int64(InfDuration/time.Microsecond) {
		return InfDuration
	}
	return time.Duration(us) * time.Microsecond
}
