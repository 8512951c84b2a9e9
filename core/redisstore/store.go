package redisstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/internal/arith"
	"github.com/sluicehq/sluice/internal/cowmap"
	"github.com/sluicehq/sluice/internal/fallback"
)

// defaultPrefix starts every key the Store writes unless WithPrefix says
// otherwise.
const defaultPrefix = "sluice:"

// maxPrefixLen is the longest prefix WithPrefix accepts, in bytes.
const maxPrefixLen = 64

// maxPlainKey is the longest user key that goes into a Redis key as is;
// longer keys, and keys with other bytes, are hashed.
const maxPlainKey = 64

// maxCachedLimits bounds the per-Store cache of prepared limits, so that
// callers building limits on the fly cannot grow it without end. The cache
// is keyed by Spec: a prepared limit holds its Redis key suffix and script
// arguments already formatted, which a Take would otherwise build anew.
const maxCachedLimits = 1024

// errInvalidPrefix is wrapped by the error New returns for a bad WithPrefix.
var errInvalidPrefix = errors.New("redisstore: invalid key prefix")

// Store is a store.Store that keeps rate-limit state in Redis, a Redis
// Cluster or any other redis.UniversalClient. Each Take is one EVALSHA of
// a Lua script (see package lua) that reads Redis' clock, decides every
// limit and writes the states with their TTLs, so concurrent Takes from
// any number of processes are decided atomically and agree on time.
//
// Besides a small cache of prepared limits, a Store holds its local
// fallback (WithFallback, on by default), a queue of Takes waiting for a
// shared round trip (WithPipelining, on by default), which changes no
// Result, and, when asked, a bounded cache of recent denials
// (WithDenyCache) and leases of hot keys (WithLeases). It is safe for
// concurrent use. Create it with New; the zero value is not usable. Close
// stops its background work.
type Store struct {
	client redis.UniversalClient
	prefix string

	cache cowmap.Map[store.Spec, *prepared] // see maxCachedLimits

	scripts *runner      // runs the scripts, reloads them when lost
	deny    *denyCache   // nil: off
	clock   func() int64 // µs, monotonic; the deny cache's clock
	// wall is the clock around which calendar windows' boundaries are
	// computed for the scripts (Redis' clock decides among them).
	wall func() time.Time

	cluster *clusterReload // nil unless client is a *redis.ClusterClient
	health  *health        // the circuit breakers (WithBreaker)
	lease   *leases        // nil: off (WithLeases, lease.go)

	log            *slog.Logger   // nil: slog.Default() (tests set one)
	warnings       counts         // what warn reported, by kind (Stats)
	evicted        sync.Map       // server address -> evicted_keys last seen (warn.go)
	evictionPolicy sync.Map       // server address -> whether its policy evicts, as last seen
	authFailed     atomic.Bool    // a refusal of the user was logged; cleared by an answer
	runIDs         sync.Map       // server address -> run_id last seen (warn.go)
	inspecting     atomic.Bool    // an inspectSoon is running
	inspections    sync.WaitGroup // inspectSoon's goroutine, waited for by Close
	// pendingClear: the subscription came back while a breaker was open;
	// the fallback is told "" when every breaker has closed (reset.go).
	pendingClear atomic.Bool
	// instances is the last count of the reset channel's subscribers.
	instances atomic.Int64
	// front is every call of store.Store: the deadline and the fallback.
	front *fallback.Store
	// tell hands a reset announced by any process to the fallback
	// (front.Announced; tests count them).
	tell atomic.Pointer[func(key string)]

	mu       sync.Mutex
	listener *listener // nil unless the fallback, the deny cache or leases need it
}

// Option configures a Store.
type Option interface{ apply(*settings) }

// optionFunc adapts a function to Option.
type optionFunc func(*settings)

func (f optionFunc) apply(s *settings) { f(s) }

type settings struct {
	prefix   string
	deny     int
	pipeline int
	clock    func() int64
	failures int
	cooldown time.Duration
	check    func(context.Context, redis.UniversalClient) error // a probe's test (tests)
	lease    *LeaseConfig                                       // nil: off (WithLeases)
	log      *slog.Logger                                       // nil: slog.Default() (tests)
	timeout  time.Duration
	local    store.Store // the fallback's store; nil: off
	now      func() time.Time
	wall     func() time.Time // nil: time.Now; calendar windows' boundaries (tests)
}

// defaultTimeout is the Store's deadline for a call to Redis unless
// WithTimeout says otherwise. A healthy Redis answers in well under a
// millisecond on a LAN and in a few milliseconds across zones; 100ms
// leaves room for a GC pause or a retransmit without handing decisions to
// the fallback, while a dead Redis costs at most this much per request
// until the circuit breaker opens (and nothing afterwards).
const defaultTimeout = 100 * time.Millisecond

// WithTimeout sets the Store's deadline for each call to Redis (default
// 100 ms); past it the call counts as failed, and the fallback decides
// (WithFallback). The deadline is a child of the caller's context, so a
// caller that goes away also ends the call. 0 sets no deadline of the
// Store's own; otherwise d must be at least 1 ms. A call that timed out
// may still have run in Redis; the fallback decides it all the same, and
// charges Redis for it only through the call's record once Redis answers
// (record.go), so it is never charged twice.
func WithTimeout(d time.Duration) Option {
	return optionFunc(func(s *settings) { s.timeout = d })
}

// WithFallback sets the store that decides while Redis fails (an error,
// the timeout, an open breaker): by default a memory store of this
// process (memorystore.New()); pass one with your own size bound, or nil
// to turn the fallback off, so that every failure reaches the caller (a
// core.Limiter then follows its failure policy).
//
// The fallback starts from Redis' last answer for a key: a key refused
// until T stays refused until T, and a key with r left gets at most r
// more until Redis said it would be full again (growing back steadily
// meanwhile for GCRA, token and leaky bucket). Of that, or of the limit
// for a key it never saw, each of N processes sharing Redis admits only
// its share, 1/N rounded down (at least 1), N being the subscribers of the
// reset channel; and what it admitted is charged to Redis once it answers
// again: a key gets about one allowance across the fleet while Redis is
// away (ALGORITHMS.md, "While the store is away"). Its decisions say so
// in Result.Fallback (core: OutcomeFallback). A Reset clears it; a call
// of a core.Limiter under FailOpen or FailClosed never reaches it.
func WithFallback(local store.Store) Option {
	return optionFunc(func(s *settings) { s.local = local })
}

// WithPrefix sets the string every key starts with; the default is
// "sluice:". Use it to keep several applications apart in one Redis. It
// must be 1 to 64 bytes without braces (they would choose the Cluster
// slot) or control characters; New reports a bad one.
func WithPrefix(prefix string) Option {
	return optionFunc(func(s *settings) { s.prefix = prefix })
}

// WithDenyCache makes the Store remember up to size recent denials in
// process: 0, the default, is off; 4096 suits most services; at most
// 16,777,216. While a denial by Redis is certain to repeat, an identical
// Take (key, cost and its one limit) gets it from memory, RetryAfter and
// ResetAfter counted down on the local monotonic clock, so a flood on an
// exhausted key costs Redis one script call per RetryAfter. The count
// starts when the first Take was sent, so an entry ends at most one round
// trip early, never late.
//
// Remembered: denials of cost 1; any cost on a full fixed window; any cost
// under a Penalty's lock, until the lock ends. Never remembered nor
// answered: Takes of several limits, peeks, InFlight limits, costs that
// can never pass (without a penalty), other costs, Takes that lease mode
// decides (WithLeases), and Charge (core.WithCountIf: a give-back can free
// a key early).
//
// A Reset in any process on this Redis and prefix reaches every deny cache
// over Pub/Sub within a round trip; the cache answers nothing until it has
// subscribed, nor while the subscription is broken, and starts empty when
// it is back. It cannot hear of keys deleted by hand (DEL, FLUSHALL),
// writes lost in a failover, or a Redis clock that jumps (miniredis'
// SetTime): it then refuses until its own clock says the denial ends,
// which is why it is off by default. It is a fixed table (size rounded up
// to a power of two, at least 256) of about 120 bytes per entry plus the
// keys; a lookup allocates nothing.
func WithDenyCache(size int) Option {
	return optionFunc(func(s *settings) { s.deny = size })
}

// New returns a Store that keeps its state in client: a *redis.Client,
// *redis.ClusterClient, *redis.Ring or failover client of Redis 7.0 or
// later. Make it with UniversalOptions or ParseURL, whose settings decide
// how long a failing call takes (see UniversalOptions). A nil client
// (typed or not) or an invalid option is an error.
//
// New does not wait for Redis: the scripts are loaded on first use, and
// again whenever Redis has lost them (restart, failover, SCRIPT FLUSH, a
// new Cluster node); with the fallback (on by default), the deny cache or
// lease mode on, the reset subscription starts in the background. Call
// Ping at start-up to check that Redis accepts the client's settings.
// Whatever the client's options, its retries charge no decision twice
// (see the package doc, "Retries and Cluster redirects"). For example:
//
//	client := redis.NewUniversalClient(redisstore.UniversalOptions("localhost:6379"))
//	store, err := redisstore.New(client)
func New(client redis.UniversalClient, opts ...Option) (*Store, error) {
	if client == nil || isNil(client) { // a typed nil panics at the first Take
		return nil, fmt.Errorf("redisstore: nil redis client (%T)", client)
	}
	s := settings{prefix: defaultPrefix, pipeline: defaultPipeline, clock: monoMicros,
		failures: defaultBreakerFailures, cooldown: defaultBreakerCooldown, timeout: defaultTimeout,
		local: memorystore.New()}
	for _, o := range opts {
		if o != nil {
			o.apply(&s)
		}
	}
	if err := s.validate(); err != nil {
		return nil, err
	}
	st := &Store{client: client, prefix: s.prefix, clock: s.clock, wall: s.wall, log: s.log}
	if st.wall == nil {
		st.wall = time.Now
	}
	st.scripts = &runner{client: client, lost: st.inspectSoon}
	var pipe func(redis.UniversalClient) *batcher
	if s.pipeline > 0 {
		pipe = func(c redis.UniversalClient) *batcher {
			b := &batcher{client: c, scripts: st.scripts, max: s.pipeline}
			switch client.(type) {
			case *redis.ClusterClient:
				b.shards = bySlot
			case *redis.Ring:
				b.shards = byTag
			}
			return b
		}
	}
	st.health = newHealth(client, s.failures, s.cooldown, pipe)
	if s.check != nil {
		st.health.check = s.check
	}
	st.health.closed = st.breakerClosed
	st.health.opened = st.breakerOpened
	st.lease = newLeases(st, s.lease) // lease.go; set before the subscription starts (it reads st.lease)
	st.front = fallback.New(direct{st}, fallback.Config{Timeout: s.timeout, Local: s.local,
		Instances: st.instanceCount, Now: s.now, Log: s.log, Hold: s.cooldown + fallback.SettleHold})
	announce := st.front.Announced
	st.tell.Store(&announce)
	if s.deny > 0 {
		st.deny = newDenyCache(s.deny)
	}
	if s.deny > 0 || s.local != nil {
		st.startListener()
	}
	st.lease.subscribe()
	if cc, ok := client.(*redis.ClusterClient); ok {
		st.cluster = &clusterReload{reload: cc.ReloadState}
		st.health.reload = func() { st.cluster.kick(st.clock()) }
	}
	return st, nil
}

// validate returns the error of the first setting New refuses.
func (s *settings) validate() error {
	if err := checkPrefix(s.prefix); err != nil {
		return err
	}
	if s.deny < 0 || s.deny > maxDenyCacheSize {
		return fmt.Errorf("redisstore: WithDenyCache(%d): want 0 (off) to %d", s.deny, maxDenyCacheSize)
	}
	if s.pipeline < 0 || s.pipeline > maxPipeline {
		return fmt.Errorf("redisstore: WithPipelining(%d): want 0 (off) to %d", s.pipeline, maxPipeline)
	}
	if err := checkBreaker(s.failures, s.cooldown); err != nil {
		return err
	}
	if err := checkLeases(s.lease); err != nil {
		return err
	}
	if s.timeout < 0 || s.timeout > 0 && s.timeout < time.Millisecond {
		return fmt.Errorf("redisstore: WithTimeout(%v): want 0 (no deadline) or at least 1ms", s.timeout)
	}
	if s.local != nil && isNil(s.local) {
		return fmt.Errorf("redisstore: WithFallback: a nil %T", s.local)
	}
	return nil
}

// isNil reports whether v holds a nil pointer, map, func or chan.
func isNil(v any) bool {
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Func, reflect.Chan:
		return rv.IsNil()
	}
	return false
}

func checkPrefix(p string) error {
	switch {
	case p == "":
		return fmt.Errorf("%w: empty", errInvalidPrefix)
	case len(p) > maxPrefixLen:
		return fmt.Errorf("%w: %d bytes, at most %d", errInvalidPrefix, len(p), maxPrefixLen)
	}
	for i := 0; i < len(p); i++ {
		switch c := p[i]; {
		case c == '{' || c == '}':
			return fmt.Errorf("%w %q: braces would choose the Redis Cluster slot", errInvalidPrefix, p)
		case c < 0x20 || c == 0x7f:
			return fmt.Errorf("%w %q: control character at byte %d", errInvalidPrefix, p, i)
		}
	}
	return nil
}

// loadScripts loads the Store's scripts into c (every master, for a
// Cluster client).
func loadScripts(ctx context.Context, c redis.Scripter) error {
	for _, sc := range allScripts {
		if err := sc.Load(ctx, c).Err(); err != nil {
			return err
		}
	}
	return nil
}

// Ping checks that Redis answers the Store's client and that its user
// has every permission the Store needs (see MinimalACL): a missing one
// fails, wrapping ErrPermission and naming each command, with the key or
// channel it was checked on. Then it loads the Store's scripts (when
// SCRIPT LOAD is permitted), logs what can make Redis lose the Store's
// state (an eviction policy, keys evicted, a restart since the last check;
// see Stats), checks that Redis accepts a write (it fails on an OOM reply:
// maxmemory reached under noeviction) and that no circuit breaker has been
// open for more than 10 s, and, when the Store listens for resets (the
// fallback, the deny cache, lease mode), waits until it has subscribed,
// so that what it keeps locally is in use. Call it at start-up, and as a
// health check: an error that Redis returned (redis.Error: a database that
// does not exist, a wrong password, a missing permission, OOM) will not
// heal by itself, and every decision would then follow the failure policy;
// a network error (Redis not started yet) may, as the Store reconnects by
// itself. It fails with ctx's error when ctx ends first.
func (s *Store) Ping(ctx context.Context) error {
	if s == nil || s.client == nil {
		return errors.New("redisstore: ping on a Store not made by New")
	}
	if err := s.client.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redisstore: ping: %w", err)
	}
	load, info, err := s.checkACL(ctx)
	if err != nil {
		return err
	}
	if load {
		if err := loadScripts(ctx, s.client); err != nil {
			return fmt.Errorf("redisstore: loading the scripts: %w", err)
		}
	}
	if info {
		s.inspect(ctx, s.client)
	} else {
		s.warn(warnUnchecked, "", "the Redis user may not run INFO: eviction policy, evictions and restarts unchecked")
	}
	if err := s.checkWrite(ctx); err != nil {
		return err
	}
	if addr, since := s.health.openLongest(); since > breakerOpenTooLong {
		return fmt.Errorf("redisstore: the circuit breaker of %s has been open for %v: decisions are made by the fallback",
			addr, since.Round(time.Millisecond))
	}
	s.mu.Lock()
	l := s.listener
	s.mu.Unlock()
	if l != nil {
		select {
		case <-l.subscribed:
		case <-ctx.Done():
			return fmt.Errorf("redisstore: subscribing to resets: %w", ctx.Err())
		}
	}
	return nil
}

// refusedUser reports whether err is Redis refusing the client's user: a
// wrong password (WRONGPASS), no authentication (NOAUTH), a missing
// permission (NOPERM).
func refusedUser(err error) bool {
	return redis.HasErrorPrefix(err, "NOPERM") || redis.HasErrorPrefix(err, "WRONGPASS") ||
		redis.HasErrorPrefix(err, "NOAUTH")
}

// breakerOpenTooLong is how long a breaker may stay open before Ping
// fails.
const breakerOpenTooLong = 10 * time.Second

// checkWrite runs an empty script that Redis treats as a write (a script
// with a shebang and no no-writes flag) on every server: Redis under
// maxmemory with noeviction refuses it with OOM, as it would a decision,
// and Ping fails naming it. It needs no key, so it runs on every master
// of a Cluster. Any other error (miniredis knows no shebang) leaves the
// memory unchecked.
func (s *Store) checkWrite(ctx context.Context) error {
	return forEachServer(ctx, s.client, func(ctx context.Context, c *redis.Client) error {
		if err := c.Eval(ctx, "#!lua\nreturn 1", nil).Err(); redis.HasErrorPrefix(err, "OOM") {
			return fmt.Errorf("redisstore: %s refuses a write, as it would a decision's: %w: %w", c.Options().Addr, store.ErrOutOfMemory, err)
		}
		return nil
	})
}

// takeRedis is Take without the fallback (see direct).
func (s *Store) takeRedis(ctx context.Context, key string, n int64, limits ...store.Spec) (store.Result, error) {
	if err := s.check(key, n, limits); err != nil {
		return store.Result{}, err
	}
	if r, ok, err := s.lease.take(ctx, key, n, limits); ok { // lease mode (lease.go); nil: off
		return r, err
	}
	if s.deny == nil || n == 0 || len(limits) != 1 || !s.deny.live.Load() {
		r, _, err := s.run(ctx, key, n, limits)
		return r, err
	}
	// The deny cache: its generation is read before the clock, so that a
	// reset announced from here on keeps this Take's denial out of it.
	gen := s.deny.gen.Load()
	t0 := s.clock()
	if r, ok := s.deny.get(key, n, limits[0], t0); ok {
		if err := ctx.Err(); err != nil {
			return store.Result{}, fmt.Errorf("redisstore: take %d on 1 limit(s): %w", n, err)
		}
		return r, nil
	}
	r, first, err := s.run(ctx, key, n, limits)
	if err == nil && !r.Allowed {
		s.deny.put(key, n, limits[0], first, t0, gen, r)
	}
	return r, err
}

// check reports bad arguments to Take, Peek or Reset.
func (s *Store) check(key string, n int64, limits []store.Spec) error {
	switch {
	case s == nil || s.client == nil:
		return errors.New("redisstore: take on a Store not made by New")
	case key == "":
		return fmt.Errorf("redisstore: take: %w", store.ErrEmptyKey)
	case n < 0:
		return fmt.Errorf("redisstore: take %d: %w", n, store.ErrNegativeCost)
	case len(limits) == 0:
		return fmt.Errorf("redisstore: take: %w: no limits", store.ErrInvalidLimit)
	}
	for i := range limits {
		if err := arith.CheckSpec(limits[i]); err != nil {
			return fmt.Errorf("redisstore: take: limit %d: %w", i, err)
		}
	}
	return nil
}

// run sends one script call for a Take of n, or for a dry run of -n when n
// is negative, and returns its Result and the first limit, prepared.
func (s *Store) run(ctx context.Context, key string, n int64, limits []store.Spec) (store.Result, *prepared, error) {
	c, err := s.call(key, n, limits)
	if err != nil {
		return store.Result{}, nil, err
	}
	return s.runCall(ctx, c, n, key, limits)
}

// runCall runs c, the script call of a Take of n (negative: a dry run of
// -n) for key under limits, through the breaker of its server, and
// decodes its reply. A charge to a server that recently lost a call is
// recorded, and sent again once if its reply is lost (record.go).
func (s *Store) runCall(ctx context.Context, c scriptCall, n int64, key string, limits []store.Spec) (store.Result, *prepared, error) {
	server := s.health.nodeFor(ctx, c.key)
	if err := server.admit(ctx); err != nil {
		return store.Result{}, nil, fmt.Errorf("redisstore: take %d on %d limit(s): %w", n, c.m, err)
	}
	var rk string // the record key of a recorded call
	plain := c
	if c.recordable(n) && server.recording() {
		rk = recordKey(c.key)
		c = c.recorded(rk)
	}
	start := monoMicros()
	reply, server, sent, err := s.send(ctx, server, c.key, c.script, c.cmd, c.splits || rk != "")
	if r, _ := redirectOf(err); r == redirectTryAgain && rk != "" {
		// A slot migration splits the recorded call's keys (its record
		// key is new: the migrating master does not hold it) for as long
		// as it lasts. The call did not run: it goes as an unrecorded one.
		c, rk = plain, ""
		reply, server, sent, err = s.send(ctx, s.health.nodeFor(ctx, c.key), c.key, c.script, fresh(c.cmd), c.splits)
	}
	server.report(ctx, err, start, sent)
	if err == nil && slow(ctx, start) {
		server.arm()
	}
	unsure := uncertain(err, sent)
	if unsure {
		server.arm()
		if rk != "" && ctx.Err() == nil {
			// The same call again, on a fresh connection: its record
			// makes it run once.
			start = monoMicros()
			reply, server, sent, err = s.send(ctx, server, c.key, c.script, fresh(c.cmd), false)
			server.report(ctx, err, start, sent)
			unsure = err != nil && (unsure || uncertain(err, sent)) // the first's outcome is still unknown
		}
	}
	var split []int64
	if r, _ := redirectOf(err); r == redirectTryAgain && c.splits {
		var stamp int64
		split, stamp, err = s.splitOf(key, c.limits).take(ctx, s, n)
		if c.stamped {
			split = append(split, stamp)
		}
	}
	if err != nil {
		return store.Result{}, nil, s.failed(err, server.addr, c, n, key, limits, rk, unsure)
	}
	if s.authFailed.Load() {
		s.authFailed.Store(false)
	}
	if split != nil {
		r, err := c.decodeInts(split, n)
		return r, c.first, err
	}
	r, err := c.decode(reply, n)
	return r, c.first, err
}

// failed returns the error of a call c of cost n that failed with err on
// the server at addr: ErrOutOfMemory for Redis' OOM, an Uncertain error
// (uncertainError) when the call may have run, and a warning once when
// Redis refuses the Store's user.
func (s *Store) failed(err error, addr string, c scriptCall, n int64, key string, limits []store.Spec, rk string, unsure bool) error {
	if s.cluster != nil {
		s.cluster.kick(s.clock())
	}
	switch {
	case redis.HasErrorPrefix(err, "OOM"):
		err = fmt.Errorf("%w: %w", store.ErrOutOfMemory, err)
	case refusedUser(err) && s.authFailed.CompareAndSwap(false, true):
		s.warn(warnAuth, addr, fmt.Sprintf("Redis refuses the Store's user (%v): every decision "+
			"goes to the failure policy until it accepts it (logged once until then)", err))
	}
	err = fmt.Errorf("redisstore: take %d on %d limit(s): %w", n, c.m, err)
	if unsure && n > 0 {
		err = s.uncertainError(err, c, n, key, limits, rk)
	}
	return err
}
