package memorystore

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash/maphash"
	"time"

	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/internal/arith"
	"github.com/sluicehq/sluice/internal/storekey"
)

// defaultMaxKeys is the number of states a Store holds at most unless
// WithMaxKeys says otherwise.
const defaultMaxKeys = 1 << 20

const (
	// maxMemoryShards is the most shards a Store splits into.
	maxMemoryShards = 256
	// minShardCapacity is the fewest states a shard is sized for: a small
	// WithMaxKeys gets fewer shards rather than tiny ones.
	minShardCapacity = 64
	// evictionSample is how many entries of its shard an insertion looks
	// at, to reclaim expired ones and to choose a victim when full: at
	// least that many, and when the shard is full, until that many of the
	// Limiter it evicts from are seen or evictionScan entries are.
	evictionSample = 8
	evictionScan   = 128
	// maxSpaces is how many namespaces a shard tells apart: the states of
	// no Limiter, and up to maxSpaces-1 Limiters; the states of any more
	// Limiters count with those of no Limiter.
	maxSpaces = 16
	// maxStoredKeyLen is the longest key stored as is; longer keys are
	// stored as their SHA-256 digest.
	maxStoredKeyLen = 256
)

// errNilStore is returned by the methods of a Store not made by New.
var errNilStore = errors.New("sluice: memorystore.Store is nil or its zero value; create it with memorystore.New")

// Store is a store.Store that keeps rate-limit state in the memory of the
// process, deciding every Algorithm with exactly the integer arithmetic of
// the Redis store (ALGORITHMS.md) at the clock given by WithClock
// (time.Now by default, read once per Take). It suits a single process,
// tests, and the Redis store's fallback while Redis is unreachable
// (redisstore.WithFallback); processes do not share it.
//
// Each (key, limit) pair is one state, and their number never exceeds the
// bound of WithMaxKeys, which says how expired states are reclaimed and
// which state goes when the store is full. A SlidingLog state also holds
// 16 bytes per request admitted in its trailing Period (at most Rate); keys
// longer than 256 bytes are stored as their SHA-256 digest.
//
// A Store is safe for concurrent use. Every limit of one key lives in one
// shard, behind one mutex, so a Take over several limits is atomic, and
// decisions on one shard are made in the order of their clock readings.
// The zero value is not usable (its methods return an error rather than
// panic): create a Store with New.
type Store struct {
	now    func() time.Time
	seed   maphash.Seed
	shards []memoryShard
	mask   uint64
}

// Option configures a Store in New.
type Option interface {
	apply(*config)
}

// optionFunc adapts a function to Option.
type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	now     func() time.Time
	maxKeys int
}

// WithClock sets the clock the store decides by; the default, and a nil
// now, is time.Now. It is meant for tests: give the store and the Limiter
// (core.WithClock) the same fake clock, such as storetest.Clock's Now, to
// make every decision reproducible.
func WithClock(now func() time.Time) Option {
	return optionFunc(func(c *config) { c.now = now })
}

// WithMaxKeys bounds the number of states the store holds (one per key and
// limit); n ≤ 0 selects the default, 2^20 (1,048,576). The bound is split
// evenly among the shards (up to 256, each sized for at least 64 states
// when n allows), so a shard that hashing fills more than others evicts
// before the store as a whole holds n states. Keep n far above the number of limits one Take
// uses: when a shard is too small to hold them all, the states that do not
// fit are not kept.
//
// Nothing ever sweeps all keys: every insertion of a new state looks at a
// few entries of its shard and deletes the expired ones (expired state
// behaves exactly like none).
//
// Each core.Limiter on the store (its name, read from the keys it builds)
// has a share of every shard: the shard's capacity divided by the number
// of Limiters holding states in it. Keys that no Limiter built (a store
// used directly) count as one more Limiter, and so do the states of
// Limiters past the 15 a shard tells apart. When the shard is still full,
// a new state evicts one of its own Limiter's while that Limiter holds at
// least its share, else one of the Limiter holding the most, which holds
// more than its share. A flood through one Limiter, however large,
// therefore evicts only that Limiter's states, and those of a Limiter
// holding more than its share down to its share: the states of a Limiter
// within its share, exhausted, penalty-locked or fresh, stay. Size n so
// that each Limiter's clients fit in its share.
//
// Within the Limiter it evicts from, the insertion evicts the sampled state
// that has used the smallest share of its allowance (of those, the one that
// expires soonest). A flood of fresh keys therefore evicts fresh state,
// which costs little to forget, and not a client's exhausted or
// penalty-locked state: a client cannot regain its allowance by making the
// store forget it, short of spending a full allowance on each key of the
// flood, in the Limiter whose state it wants forgotten.
//
// A full store takes every newcomer: it is decided as a client with its
// full allowance, and its state is kept at the cost of the one chosen
// above. The store neither refuses newcomers for want of room, which would
// let a flood lock out every new client, nor leaves them unremembered,
// which would let every new client go unlimited while the store is full.
// (The exceptions are a shard too small for one key's limits, and an
// insertion whose sample of 128 entries holds none of the Limiter it must
// evict from: less likely than one in 3,000 with 16 Limiters of equal
// shares in one shard, and vanishingly so with a few.)
func WithMaxKeys(n int) Option {
	return optionFunc(func(c *config) { c.maxKeys = n })
}

// New returns an empty Store.
func New(opts ...Option) *Store {
	cfg := config{now: time.Now, maxKeys: defaultMaxKeys}
	for _, opt := range opts {
		if opt != nil {
			opt.apply(&cfg)
		}
	}
	if cfg.now == nil {
		cfg.now = time.Now
	}
	if cfg.maxKeys <= 0 {
		cfg.maxKeys = defaultMaxKeys
	}
	shards := 1
	for shards < maxMemoryShards && cfg.maxKeys/(2*shards) >= minShardCapacity {
		shards *= 2
	}
	s := &Store{
		now:    cfg.now,
		seed:   maphash.MakeSeed(),
		shards: make([]memoryShard, shards),
		mask:   uint64(shards - 1),
	}
	for i := range s.shards {
		s.shards[i].seed = s.seed
		s.shards[i].capacity = cfg.maxKeys / shards
		if i < cfg.maxKeys%shards {
			s.shards[i].capacity++
		}
	}
	return s
}

// len returns the number of states the store holds, expired ones not yet
// reclaimed included.
func (s *Store) len() int {
	if s == nil {
		return 0
	}
	total := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		total += sh.len()
		sh.mu.Unlock()
	}
	return total
}

// Take charges n against every limit for key, atomically, and reports the
// decision (see store.Result). All limits are evaluated at
// one instant against the state before the call; either every limit allows and every
// one is charged, or nothing is charged except the penalty locks of the
// limits that denied. n == 0 peeks: it is decided like any request and
// writes nothing.
//
// Take returns an error wrapping store.ErrEmptyKey, store.ErrNegativeCost
// or store.ErrInvalidLimit (no limits, or the zero Spec) for bad input, and
// ctx's error when ctx is already done; otherwise it never fails and never
// blocks beyond a short critical section. With one limit and a key it has seen before it allocates nothing.
// Take keeps no reference to key (a new state stores a copy), so a caller
// may pass a key built in a buffer it reuses.
func (s *Store) Take(ctx context.Context, key string, n int64, limits ...store.Spec) (res store.Result, err error) {
	err = s.take(ctx, key, n, limits, &res, true)
	res.Stamp = 0 // Charge's
	return res, err
}

// Peek returns the Result Take would return now, without charging
// anything or setting a penalty lock. It fails like Take.
func (s *Store) Peek(ctx context.Context, key string, n int64, limits ...store.Spec) (store.Result, error) {
	var res store.Result
	err := s.take(ctx, key, n, limits, &res, false)
	res.Stamp = 0
	return res, err
}

// take decides a Take into res, which it leaves zero on error; charge
// false makes it a Peek. (The Result is written in place: returning it
// through each call costs a few ns on the hot path.) A Take of several
// limits goes to decide; one limit (the usual case) is decided here, with
// the steps of several left out.
func (s *Store) take(ctx context.Context, key string, n int64, limits []store.Spec, res *store.Result, charge bool) error {
	if err := s.checkInput(ctx, key, n, limits); err != nil {
		return err
	}
	if len(limits) > 1 {
		return s.decide(res, key, n, limits, charge)
	}
	var one [1]limitEval
	e := &one[0]
	if e.sp.set(&limits[0]); e.sp.rate <= 0 {
		return arith.CheckSpec(limits[0]) // the zero Spec's error
	}
	key, digest := storedKey(key)
	sh, h := s.shardOf(key)
	sh.mu.Lock()
	now := s.now().UnixMicro()
	e.st, _ = sh.find(h, key, digest, &e.sp)
	evaluate(&e.o, &e.sp, e.state(), now, n)
	if e.sp.alg == algInFlight && e.o.allowed && charge && n > 0 {
		pickSlot(one[:], now)
	}
	if e.st != nil {
		e.write(e.st, e.o.allowed, n, charge, now)
	} else {
		sh.writeAbsent(e, h, key, digest, e.o.allowed, n, charge, now)
	}
	sh.mu.Unlock()
	e.o.fill(res)
	res.Stamp = now
	return nil
}

// checkInput returns the error of a call with a bad store, key, cost or
// limit list, or with ctx done.
func (s *Store) checkInput(ctx context.Context, key string, n int64, limits []store.Spec) error {
	switch {
	case s == nil || s.shards == nil:
		return errNilStore
	case key == "":
		return fmt.Errorf("%w: Take needs a key identifying the client", store.ErrEmptyKey)
	case n < 0:
		return fmt.Errorf("%w: n = %d", store.ErrNegativeCost, n)
	case len(limits) == 0:
		return fmt.Errorf("%w: no limits", store.ErrInvalidLimit)
	}
	if ctx != nil {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("sluice: memory store: %w", err)
		}
	}
	return nil
}

// Reset deletes the states of key under limits, penalty locks included.
// It fails like Take for a bad key or limit, and with an error wrapping
// store.ErrNotFound when key held no state under limits.
func (s *Store) Reset(ctx context.Context, key string, limits ...store.Spec) error {
	if err := s.checkInput(ctx, key, 0, limits); err != nil {
		return err
	}
	evs := make([]limitEval, len(limits))
	if err := specsOf(limits, evs); err != nil {
		return err
	}
	key, digest := storedKey(key)
	sh, h := s.shardOf(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	found := false
	for i := range evs {
		if st, ok := sh.find(h, key, digest, &evs[i].sp); ok {
			sh.remove(st)
			found = true
		}
	}
	if !found {
		return fmt.Errorf("memorystore: reset: %w", store.ErrNotFound)
	}
	return nil
}

// storedKey returns the form a key is stored under: itself, or for a key
// longer than maxStoredKeyLen its SHA-256 digest, after the prefix of the
// Limiter that built it if any (storekey.Name: at most 133 bytes, so that
// its namespace is known), so a flood of huge keys cannot hold more than a
// few dozen bytes per state beyond its Limiter's prefix.
func storedKey(key string) (string, bool) {
	if len(key) <= maxStoredKeyLen {
		return key, false
	}
	return digestKey(key), true
}

// digestKey is storedKey's form of a long key.
func digestKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	if _, n, ok := storekey.Name(key); ok {
		return key[:n] + string(sum[:])
	}
	return string(sum[:])
}

func makeStateKey(key string, digest bool, sp *algSpec) stateKey {
	k := stateKey{
		key: key, digest: digest, alg: sp.alg,
		rate: sp.rate, period: sp.period, burst: sp.burst, penalty: sp.penalty,
		cal: sp.cal, zone: zoneName(sp.zone),
	}
	return k
}

func toAlgSpec(sp *store.Spec) algSpec {
	var a algSpec
	a.set(sp)
	return a
}

// set makes a the arithmetic's form of sp, in place: Take does it for
// every limit of every call, and building the value to copy it costs
// more than the fields.
func (a *algSpec) set(sp *store.Spec) {
	a.alg, a.rate, a.period = algCodeOf(sp.Algorithm()), sp.Rate(), sp.Period()
	a.burst, a.penalty, a.interval = sp.Burst(), sp.Penalty(), sp.Interval()
	a.cal, a.zone = calNone, nil
	if a.alg != algFixedWindow {
		return // only a FixedWindow is a calendar window
	}
	if unit, zone := sp.Calendar(); unit != "" {
		a.cal, a.zone = calUnitOf(unit), zone
	}
}

// specsOf fills evs[i].sp with the arithmetic's form of limits[i], or
// returns the error of a limit that is not valid.
func specsOf(limits []store.Spec, evs []limitEval) error {
	for i := range limits {
		if evs[i].sp.set(&limits[i]); evs[i].sp.rate > 0 {
			continue
		}
		err := arith.CheckSpec(limits[i]) // the zero Spec's error
		if len(limits) > 1 {
			err = fmt.Errorf("limits[%d]: %w", i, err)
		}
		return err
	}
	return nil
}

// shardOf returns the shard of a stored key, and the key's hash there.
func (s *Store) shardOf(key string) (*memoryShard, uint64) {
	h := maphash.String(s.seed, key)
	return &s.shards[h&s.mask], h
}

// limitEval is the scratch of one limit of a Take. It holds no key, so
// that the call's key does not escape along with the scratch's states.
type limitEval struct {
	sp  algSpec
	st  *memoryState // the stored state; nil when absent
	dup bool         // the same state as an earlier limit of this call
	o   outcome
}

// absent is the state of every absent entry, as evaluate reads it. Nothing
// writes it: a new state is built in a copy (see writeAbsent).
var absent memoryState

// state returns the limit's state, for reading.
func (e *limitEval) state() *memoryState {
	if e.st != nil {
		return e.st
	}
	return &absent
}

// decide decides a Take over several limits and writes it when charge is
// set: all limits are evaluated at one instant, under the lock of the
// key's shard, against the state before the call; then a state is written
// for each limit that changed and had none.
func (s *Store) decide(res *store.Result, key string, n int64, limits []store.Spec, charge bool) error {
	// The scratch of each limit, on the stack unless there are many.
	var few [4]limitEval
	evs := few[:]
	if len(limits) > len(few) {
		evs = make([]limitEval, len(limits))
	}
	evs = evs[:len(limits)]
	if err := specsOf(limits, evs); err != nil {
		return err
	}
	key, digest := storedKey(key)
	sh, h := s.shardOf(key)
	sh.mu.Lock()
	for i := 1; i < len(evs); i++ {
		for j := 0; j < i; j++ {
			if evs[j].sp.sameState(&evs[i].sp) {
				evs[i].dup = true
				break
			}
		}
	}
	now := s.now().UnixMicro()
	allowed, inFlight := true, false
	for i := range evs {
		e := &evs[i]
		e.st, _ = sh.find(h, key, digest, &e.sp)
		evaluate(&e.o, &e.sp, e.state(), now, n)
		allowed = allowed && e.o.allowed
		inFlight = inFlight || e.sp.alg == algInFlight
	}
	if allowed && charge && n > 0 && inFlight {
		pickSlot(evs, now)
	}
	for i := range evs {
		if e := &evs[i]; e.st != nil {
			e.write(e.st, allowed, n, charge, now)
		} else {
			sh.writeAbsent(e, h, key, digest, allowed, n, charge, now)
		}
	}
	sh.mu.Unlock()
	perLimit := make([]store.Result, len(evs))
	for i := range evs {
		evs[i].o.fill(&perLimit[i])
	}
	*res = arith.Combine(perLimit)
	res.Stamp = now
	return nil
}

// writeAbsent is write for a limit whose state is absent: the state is
// built in a zero one, and stored if the decision wrote it (h is the
// key's hash). The caller holds sh.mu.
func (sh *memoryShard) writeAbsent(e *limitEval, h uint64, key string, digest bool, allowed bool, n int64, charge bool, now int64) {
	fresh := memoryState{zone: e.sp.zone}
	if e.write(&fresh, allowed, n, charge, now) {
		k := makeStateKey(sh.keyCopy(h, key), digest, &e.sp)
		sh.insert(&k, &fresh, now)
	}
}

// write applies the call's decision to st, the limit's state (a zero one
// for an absent entry), and reports whether it changed it: when every limit allows (allowed), the charge;
// otherwise the penalty lock of a limit that denied. A peek (charge false,
// or n == 0) writes nothing, not even a lock, and a limit listed twice is
// written once. A limit that allowed in a denied call reports what a peek
// sees.
func (e *limitEval) write(st *memoryState, allowed bool, n int64, charge bool, now int64) bool {
	switch {
	case allowed:
		if n == 0 || e.dup || !charge {
			return false
		}
		apply(st, &e.o, &e.sp, n, now)
	case e.o.allowed:
		evaluate(&e.o, &e.sp, st, now, 0)
		return false
	case !e.o.byLock && e.sp.penalty > 0 && !e.dup && n > 0 && charge:
		lock(st, &e.sp, now)
	default:
		return false
	}
	return true
}

// fill sets the fields of r from an outcome's µs figures. (It writes r in
// place: building a Result and copying it costs a few ns on the hot path.)
func (o *outcome) fill(r *store.Result) {
	r.Allowed = o.allowed
	r.Limit = o.limit
	r.Remaining = o.remain
	r.RetryAfter = arith.Micros(o.retry)
	r.ResetAfter = arith.Micros(o.reset)
	r.Delay = arith.Micros(o.delay)
	r.Slot = o.slot
}
