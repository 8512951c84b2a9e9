package redisstore

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/core/store"
)

// maxDenyCacheSize bounds WithDenyCache (entries are about 120 bytes).
const maxDenyCacheSize = 1 << 24

// denyShards is the number of independently locked parts of a deny cache.
const denyShards = 32

// denyWays is the number of slots a denial may take (a set-associative
// table): a few keys that hash alike do not evict each other in turn.
const denyWays = 8

// denyCache remembers recent denials that Redis will repeat, so that the
// Store can answer them without a round trip. It is a fixed-size, 8-way
// set-associative table split into shards, each under its own mutex: an
// insert takes a free or ended slot of its set, else a slot chosen by its
// hash (so that when more denials than ways share a set, most of them stay
// and only a few displace each other, rather than all in turn); nothing is
// ever swept, and a lookup costs one hash and at most eight comparisons.
//
// Only denials whose every figure is known until they end are stored (see
// cacheable), so an answer from the cache is the one Redis would give.
type denyCache struct {
	// live is set while the Store's listener is subscribed to resets:
	// only then may the cache answer.
	live atomic.Bool
	// gen counts the resets seen (and the listener's outages): a denial
	// is stored only if none came since its Take was sent.
	gen    atomic.Uint64
	seed   maphash.Seed
	shards [denyShards]denyShard
	mask   uint64 // sets per shard - 1
}

type denyShard struct {
	mu sync.Mutex
	e  []denyEntry
	_  [40]byte // keep shards' mutexes on separate cache lines
}

// denyEntry is one remembered denial of Take(key, n, limit), made at t0 on
// the cache's clock (µs). Until t0+retry every identical Take is denied
// with RetryAfter retry-(now-t0) and ResetAfter max(0, reset-(now-t0)).
type denyEntry struct {
	hash  uint64
	key   string
	limit store.Spec
	n     int64
	t0    int64
	until int64 // t0 + retry; 0: empty slot
	retry int64
	reset int64
	lim   int64
}

func newDenyCache(size int) *denyCache {
	sets := 1
	for sets*denyShards*denyWays < size {
		sets <<= 1
	}
	c := &denyCache{seed: maphash.MakeSeed(), mask: uint64(sets - 1)}
	for i := range c.shards {
		c.shards[i].e = make([]denyEntry, sets*denyWays)
	}
	return c
}

func (c *denyCache) hash(key string, n int64, l store.Spec) uint64 {
	h := maphash.String(c.seed, key)
	h ^= uint64(n) * 0x9e3779b97f4a7c15
	h = (h ^ uint64(l.Rate())) * 0xff51afd7ed558ccd
	h = (h ^ uint64(l.Period())) * 0xc4ceb9fe1a85ec53
	h = (h ^ uint64(l.Burst()) ^ uint64(l.Penalty())<<1) * 0xff51afd7ed558ccd
	if a := l.Algorithm(); len(a) > 0 {
		h ^= uint64(a[0]) | uint64(len(a))<<8
	}
	return h ^ h>>29
}

// set returns the shard and the set of slots of hash h.
func (c *denyCache) set(h uint64) (*denyShard, []denyEntry) {
	sh := &c.shards[h%denyShards]
	i := ((h / denyShards) & c.mask) * denyWays
	return sh, sh.e[i : i+denyWays : i+denyWays]
}

// get returns the cached denial of Take(key, n, l) at now (µs), if any.
func (c *denyCache) get(key string, n int64, l store.Spec, now int64) (store.Result, bool) {
	h := c.hash(key, n, l)
	sh, set := c.set(h)
	sh.mu.Lock()
	var e *denyEntry
	for i := range set {
		if x := &set[i]; x.hash == h && x.until != 0 && x.n == n && x.key == key && x.limit == l {
			e = x
			break
		}
	}
	if e == nil || now >= e.until {
		sh.mu.Unlock()
		return store.Result{}, false
	}
	// A Take that read the clock before a concurrent one stored this
	// denial counts as simultaneous with it.
	d := max(0, now-e.t0)
	r := store.Result{
		Limit:      e.lim,
		RetryAfter: time.Duration(e.retry-d) * time.Microsecond,
		ResetAfter: time.Duration(max(0, e.reset-d)) * time.Microsecond,
	}
	sh.mu.Unlock()
	return r, true
}

// put remembers r, the Result of Take(key, n, l) sent at t0 (µs) in
// generation gen, when it is a denial that identical Takes will get until
// it ends (see cacheable), and no reset came since gen.
func (c *denyCache) put(key string, n int64, l store.Spec, p *prepared, t0 int64, gen uint64, r store.Result) {
	retry, ok := cacheable(n, p, r)
	if !ok {
		return
	}
	h := c.hash(key, n, l)
	sh, set := c.set(h)
	sh.mu.Lock()
	// forget and clear move gen before they lock a shard, so either they
	// see this entry or this sees their gen.
	if c.gen.Load() != gen {
		sh.mu.Unlock()
		return
	}
	// The same Take's slot, else a free or ended one, else one chosen by
	// the hash.
	var e *denyEntry
	for i := range set {
		x := &set[i]
		if x.hash == h && x.n == n && x.key == key && x.limit == l {
			e = x
			break
		}
		if e == nil && x.until <= t0 {
			e = x
		}
	}
	if e == nil {
		e = &set[(h>>40)%denyWays]
	}
	*e = denyEntry{
		hash: h, key: key, limit: l, n: n, t0: t0, until: t0 + retry,
		retry: retry, reset: int64(r.ResetAfter / time.Microsecond), lim: r.Limit,
	}
	sh.mu.Unlock()
}

// forget drops every denial of key (a reset).
func (c *denyCache) forget(key string) {
	c.gen.Add(1)
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		for j := range sh.e {
			if e := &sh.e[j]; e.until != 0 && e.key == key {
				*e = denyEntry{}
			}
		}
		sh.mu.Unlock()
	}
}

// suspend stops the cache from answering and empties it: resets may go
// unheard until reopen.
func (c *denyCache) suspend() {
	c.live.Store(false)
	c.clear()
}

// reopen empties the cache and lets it answer again.
func (c *denyCache) reopen() {
	c.clear()
	c.live.Store(true)
}

func (c *denyCache) clear() {
	c.gen.Add(1)
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		clear(sh.e)
		sh.mu.Unlock()
	}
}

// cacheable reports whether r, the Result of a Take of cost n on the one
// limit p, is a denial that every identical Take will get, figure for
// figure, for the next retry µs, and returns retry. Nothing a Take does
// can free a key earlier than its RetryAfter (takes only add to a state),
// so the denial itself always holds until then; what must also hold is
// that every reported figure moves predictably:
//
//   - With a penalty, the key is locked for min(RetryAfter, Penalty) (a new
//     lock lasts Penalty; an older one ends at RetryAfter). While it holds,
//     Redis answers Remaining 0, RetryAfter = the lock's rest and
//     ResetAfter decreasing with time, whatever the cost. It is not cached
//     past the lock: the next denial after it would set a new lock.
//   - Without a penalty, a denial of cost 1 has Remaining 0, and Remaining
//     becomes 1 exactly when cost 1 is admitted again, at RetryAfter, for
//     every algorithm; ResetAfter decreases one for one with time (see
//     ALGORITHMS.md). A fixed window with Remaining 0 stays full, whatever
//     the cost, until the window ends at RetryAfter. Other costs may see
//     Remaining grow before RetryAfter, so they are not cached.
//   - A cost that can never pass (RetryAfter InfDuration) without a penalty
//     is not cached: its Remaining and ResetAfter follow the key's traffic.
//   - Peeks (n == 0) are never denied by an algorithm and are not cached.
//   - InFlight limits are not cached: a released slot frees the key at any
//     time.
func cacheable(n int64, p *prepared, r store.Result) (int64, bool) {
	if r.Allowed || n <= 0 || r.RetryAfter <= 0 || p.alg == store.InFlight {
		return 0, false // a released slot frees an InFlight key at any time
	}
	if p.penalty > 0 {
		retry := p.penalty
		if r.RetryAfter != store.InfDuration {
			retry = min(retry, int64(r.RetryAfter/time.Microsecond))
		}
		return retry, retry > 0
	}
	if r.RetryAfter == store.InfDuration || r.Remaining != 0 {
		return 0, false
	}
	if n != 1 && p.alg != store.FixedWindow {
		return 0, false
	}
	return int64(r.RetryAfter / time.Microsecond), true
}

// monoBase anchors the default clock of deny caches: microseconds of the
// monotonic clock since the package was loaded.
var monoBase = time.Now()

func monoMicros() int64 { return int64(time.Since(monoBase) / time.Microsecond) }
