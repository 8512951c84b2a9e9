package redisstore

import (
	"context"
	"fmt"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/core/store"
)

// Lease mode defaults (see LeaseConfig).
const (
	defaultLeaseMaxUnits = 64
	defaultLeaseMinUnits = 16
	defaultLeaseShare    = 16
	defaultLeaseTTL      = 250 * time.Millisecond
	defaultLeaseHotTakes = 40
	defaultLeaseMaxKeys  = 1024
)

// leaseShards is the number of independently locked parts of the table of
// keys in lease mode.
const leaseShards = 16

var leaseScript = newScript(leaseSource)

// LeaseConfig configures lease mode (WithLeases). A zero field takes its
// default.
type LeaseConfig struct {
	// MaxUnits is the most units one lease holds, so the most this process
	// holds unspent of one key under one limit (default 64; 2 to 2^20).
	// A limit whose capacity/Share is smaller caps it there; a limit whose
	// cap comes out below 2 is never leased.
	MaxUnits int64
	// MinUnits is the least a lease asks for (default 16, at most
	// MaxUnits). Between the two, a lease asks for about one TTL's worth of
	// the key's Takes in this process, measured; MinUnits == MaxUnits
	// makes the size fixed.
	MinUnits int64
	// Share caps a lease at capacity/Share units (store.Spec.Capacity:
	// Burst, or Rate for the windows), so that a lease is a small part of
	// what the limit allows (default 16; 2 to 2^20).
	Share int64
	// TTL is how long a lease lasts: its unspent units are given back to
	// Redis when it ends, and it is the interval over which Takes are
	// counted to find hot keys (default 250ms; 10ms to 1 minute).
	TTL time.Duration
	// HotTakes is the number of Takes of one key under one limit, in this
	// process, within one TTL, that put the key in lease mode (default 40;
	// 1 to 2^30). Keys below it stay exact.
	HotTakes int
	// MaxKeys bounds the keys in lease mode at once in this process
	// (default 1024; 1 to 2^20); further hot keys stay exact.
	MaxKeys int
}

// WithLeases turns lease mode on (off by default, and off it changes
// nothing): a key this process Takes HotTakes times within a TTL is
// decided locally from a lease, a share of its allowance charged in Redis
// in one call, and the units left unspent are given back when the lease
// ends or at Close. A key just that hot costs Redis about 2/HotTakes calls
// per Take, a very hot one about 1/S (1/20 and 1/64 by default). A refill
// starts in the background when a quarter of the lease is left; Takes that
// find it empty wait for that one refill. At most MaxKeys keys are in
// lease mode, none before the Store has subscribed to reset announcements.
//
// Leased: Takes of one limit without a Penalty, of cost 1 to the lease cap
// S = min(MaxUnits, capacity/Share), on GCRA, TokenBucket, FixedWindow or
// SlidingWindow. Everything else (several limits, peeks, penalties,
// LeakyBucket, SlidingLog, Charge) takes the exact path, unchanged.
//
// The price is a bound instead of exactness: P processes leasing a key
// admit over any interval at most P·S more than the exact path could, and
// the windows keep their own bounds. A Take may be denied for up to a TTL
// while other processes hold units; Remaining is approximate and
// RetryAfter 0 when allowed; Peek reads Redis, where leased units count as
// spent. A Reset drops the key's leases in every process within a round
// trip, unspent units lost; a process whose subscription is broken may
// spend the S units it holds for at most a TTL, and drops every lease once
// back. ALGORITHMS.md, "Leases", states the bound, its proof and figures.
func WithLeases(cfg LeaseConfig) Option {
	return optionFunc(func(s *settings) { c := cfg; s.lease = &c })
}

// checkLeases applies the defaults to c and reports a bad field.
func checkLeases(c *LeaseConfig) error {
	if c == nil {
		return nil
	}
	def := func(v *int64, d int64) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.MaxUnits, defaultLeaseMaxUnits)
	def(&c.MinUnits, min(defaultLeaseMinUnits, c.MaxUnits))
	def(&c.Share, defaultLeaseShare)
	if c.TTL == 0 {
		c.TTL = defaultLeaseTTL
	}
	if c.HotTakes == 0 {
		c.HotTakes = defaultLeaseHotTakes
	}
	if c.MaxKeys == 0 {
		c.MaxKeys = defaultLeaseMaxKeys
	}
	switch {
	case c.MaxUnits < 2 || c.MaxUnits > 1<<20, c.MinUnits < 1 || c.MinUnits > c.MaxUnits,
		c.Share < 2 || c.Share > 1<<20, c.TTL < 10*time.Millisecond || c.TTL > time.Minute,
		c.HotTakes < 1 || c.HotTakes > 1<<30, c.MaxKeys < 1 || c.MaxKeys > 1<<20:
		return fmt.Errorf("redisstore: WithLeases(%+v): a field is out of range (see LeaseConfig)", *c)
	}
	return nil
}

// leases is a Store's lease mode: the keys in it, a sketch that counts
// Takes to find hot keys, and a sweeper that gives back ended leases.
type leases struct {
	st     *Store
	cfg    LeaseConfig
	ttl    int64 // µs
	seed   maphash.Seed
	keys   atomic.Int64 // entries in shards
	live   atomic.Bool  // the Store has subscribed to reset announcements: leases may be taken
	shards [leaseShards]leaseShard
	hot    []atomic.Uint64 // epoch<<32 | Takes in that epoch, by hash
	calls  atomic.Int64    // lease script calls made (for tests)

	stop    chan struct{}
	done    chan struct{}  // closed when the sweeper has returned
	bg      sync.WaitGroup // refills ahead of need
	started sync.Once      // the sweeper
	once    sync.Once      // close
}

type leaseShard struct {
	mu sync.RWMutex
	m  map[leaseKey]*lease
	_  [32]byte // keep shards' locks on separate cache lines
}

// leaseKey names the state a lease draws on: a key under one limit.
type leaseKey struct {
	key   string
	limit store.Spec
}

// newLeases returns lease mode for st with cfg (defaults applied), or nil
// when cfg is nil. st is being made by New. Its sweeper starts with the
// first hot key.
func newLeases(st *Store, cfg *LeaseConfig) *leases {
	if cfg == nil {
		return nil
	}
	sketch := 1024
	for sketch < 4*cfg.MaxKeys {
		sketch <<= 1
	}
	l := &leases{st: st, cfg: *cfg, ttl: int64(cfg.TTL / time.Microsecond), seed: maphash.MakeSeed(),
		hot: make([]atomic.Uint64, sketch), stop: make(chan struct{}), done: make(chan struct{})}
	for i := range l.shards {
		l.shards[i].m = make(map[leaseKey]*lease)
	}
	return l
}

// subscribe starts the Store's subscription to reset announcements, which
// lease mode needs, unless it has started; New calls it. It is safe on a
// nil *leases.
func (l *leases) subscribe() {
	if l != nil && l.st.listener == nil {
		l.st.startListener()
	}
}

// suspend stops new leases until the Store has subscribed to reset
// announcements again (a Reset may go unheard meanwhile); leases already
// held run out within their TTL. Nil-safe.
func (l *leases) suspend() {
	if l != nil {
		l.live.Store(false)
	}
}

// leasable reports whether lease mode can decide a Take of lim: GCRA,
// token bucket and the two windows, without a penalty, but calendar windows.
func leasable(lim store.Spec) bool {
	switch lim.Algorithm() {
	case store.GCRA, store.TokenBucket, store.FixedWindow, store.SlidingWindow:
		unit, _ := lim.Calendar() // a calendar window's end is not P's multiple
		return lim.Penalty() == 0 && unit == ""
	}
	return false
}

// take is the Store's hook: it decides Take(key, n, limits) from a lease
// when the key is hot (ok true), and leaves it to the exact path
// otherwise (ok false). It is safe on a nil *leases (lease mode off).
func (l *leases) take(ctx context.Context, key string, n int64, limits []store.Spec) (store.Result, bool, error) {
	if l == nil || n <= 0 || n > l.cfg.MaxUnits || len(limits) != 1 || !leasable(limits[0]) {
		return store.Result{}, false, nil
	}
	lk := leaseKey{key, limits[0]}
	h := l.hash(key, limits[0])
	sh := &l.shards[h%leaseShards]
	sh.mu.RLock()
	e := sh.m[lk]
	sh.mu.RUnlock()
	if e == nil {
		if !l.heat(h) {
			return store.Result{}, false, nil
		}
		if e = l.admit(sh, lk); e == nil {
			return store.Result{}, false, nil
		}
	}
	return e.take(ctx, l, n)
}

func (l *leases) hash(key string, lim store.Spec) uint64 {
	h := maphash.String(l.seed, key)
	h = (h ^ uint64(lim.Rate())) * 0xff51afd7ed558ccd
	h = (h ^ uint64(lim.Period())) * 0xc4ceb9fe1a85ec53
	h = (h ^ uint64(lim.Burst())) * 0xff51afd7ed558ccd
	if a := lim.Algorithm(); len(a) > 0 {
		h ^= uint64(a[0]) | uint64(len(a))<<8
	}
	return h ^ h>>29
}

// heat counts a Take of the key and limit of hash h in the current TTL
// interval and reports whether it is the HotTakes-th (the key turns hot,
// once per interval). Keys whose hashes meet share a count: a cold key may
// then be leased, never a hot one left out.
func (l *leases) heat(h uint64) bool {
	c := &l.hot[(h>>32)&uint64(len(l.hot)-1)]
	epoch := uint64(l.st.clock()/l.ttl) & 0xffffffff
	for {
		old := c.Load()
		next := epoch<<32 | 1
		if old>>32 == epoch {
			next = old + 1
		}
		if c.CompareAndSwap(old, next) {
			return next&0xffffffff == uint64(l.cfg.HotTakes)
		}
	}
}

// admit puts lk in lease mode and returns its entry, unless the Store has
// not yet subscribed to reset announcements (a Reset could go unheard),
// MaxKeys are, or lk's limit is too small to lease or invalid (the exact
// path reports it): nil, stay exact.
func (l *leases) admit(sh *leaseShard, lk leaseKey) *lease {
	if !l.live.Load() || l.keys.Load() >= int64(l.cfg.MaxKeys) {
		return nil
	}
	e := l.newLease(lk)
	if e == nil {
		return nil
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if old := sh.m[lk]; old != nil {
		return old
	}
	sh.m[lk] = e
	l.keys.Add(1)
	l.started.Do(func() { go l.run() })
	return e
}
