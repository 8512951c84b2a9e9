package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/internal/redistest"
)

// Tests against a real redis-server (Lua 5.1, not gopher-lua). Time runs,
// so figures that depend on the time between calls get a tolerance.

const slack = 250 * time.Millisecond // time two consecutive calls may be apart

func realStore(tb testing.TB, client redis.UniversalClient, opts ...Option) *Store {
	tb.Helper()
	s, err := New(client, append(bare(), opts...)...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = s.Close() })
	waitListening(tb, s)
	return s
}

func sharedClient(tb testing.TB) *redis.Client {
	tb.Helper()
	srv := redistest.Shared(tb)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	tb.Cleanup(func() { _ = client.Close() })
	return client
}

func takeOK(tb testing.TB, s *Store, key string, n int64, limits ...store.Limit) store.Result {
	tb.Helper()
	r, err := s.Take(context.Background(), key, n, specs(limits...)...)
	if err != nil {
		tb.Fatalf("Take(%q, %d): %v", key, n, err)
	}
	return r
}

// near checks a figure that shrinks as time passes: max-slack < got <= max.
func near(tb testing.TB, what string, got, max time.Duration) {
	tb.Helper()
	if got > max || got <= max-slack {
		tb.Errorf("%s = %v, want in (%v, %v]", what, got, max-slack, max)
	}
}

func TestRedisFigures(t *testing.T) {
	s := realStore(t, sharedClient(t))
	key := "figures:" + strconv.FormatInt(time.Now().UnixNano(), 36)

	// First calls: no time passes inside one script, so these are exact.
	check(t, "gcra example", takeOK(t, s, key, 1, store.Limit{Algorithm: store.GCRA, Rate: 30, Period: time.Minute, Burst: 16}),
		want{true, 16, 15, 0, 2 * time.Second, 0})

	one := store.Limit{Algorithm: store.GCRA, Rate: 1, Period: 2 * time.Second, Burst: 1}
	check(t, "gcra 1/2s", takeOK(t, s, key, 1, one), want{true, 1, 0, 0, 2 * time.Second, 0})
	r := takeOK(t, s, key, 1, one)
	if r.Allowed || r.Remaining != 0 || r.RetryAfter != r.ResetAfter {
		t.Errorf("gcra 1/2s second: %+v", r)
	}
	near(t, "gcra 1/2s retry", r.RetryAfter, 2*time.Second)

	leaky := store.Limit{Algorithm: store.LeakyBucket, Rate: 1, Period: time.Second, Burst: 2}
	check(t, "leaky 1st", takeOK(t, s, key, 1, leaky), want{true, 3, 2, 0, time.Second, 0})
	r = takeOK(t, s, key, 1, leaky)
	if !r.Allowed || r.Remaining != 1 {
		t.Errorf("leaky 2nd: %+v", r)
	}
	near(t, "leaky delay", r.Delay, time.Second)
	near(t, "leaky reset", r.ResetAfter, 2*time.Second)

	token := store.Limit{Algorithm: store.TokenBucket, Rate: 10, Period: time.Second, Burst: 5}
	check(t, "token 3", takeOK(t, s, key, 3, token), want{true, 5, 2, 0, 300 * time.Millisecond, 0})
	r = takeOK(t, s, key, 4, token)
	if r.Allowed || r.Remaining < 2 {
		t.Errorf("token 4 after 3: %+v", r)
	}
	near(t, "token retry", r.RetryAfter, 200*time.Millisecond)
	if r = takeOK(t, s, key, 6, token); r.Allowed || r.RetryAfter != inf || r.Remaining != 2 {
		t.Errorf("token 6 > burst: %+v", r)
	}

	fixed := store.Limit{Algorithm: store.FixedWindow, Rate: 3, Period: 10 * time.Second}
	r = takeOK(t, s, key, 3, fixed)
	if !r.Allowed || r.Remaining != 0 || r.ResetAfter <= 0 || r.ResetAfter > 10*time.Second {
		t.Errorf("fixed 3: %+v", r)
	}
	if d := takeOK(t, s, key, 1, fixed); d.Allowed {
		t.Logf("fixed: the window turned between two calls: %+v", d)
	} else {
		if d.RetryAfter != d.ResetAfter {
			t.Errorf("fixed 4th: retry %v != reset %v", d.RetryAfter, d.ResetAfter)
		}
		near(t, "fixed retry", d.RetryAfter, r.ResetAfter)
	}

	log := store.Limit{Algorithm: store.SlidingLog, Rate: 3, Period: 10 * time.Second}
	check(t, "log 3", takeOK(t, s, key, 3, log), want{true, 3, 0, 0, 10 * time.Second, 0})
	r = takeOK(t, s, key, 1, log)
	if r.Allowed || r.RetryAfter != r.ResetAfter {
		t.Errorf("log 4th: %+v", r)
	}
	near(t, "log retry", r.RetryAfter, 10*time.Second)

	sliding := store.Limit{Algorithm: store.SlidingWindow, Rate: 10, Period: 10 * time.Second}
	r = takeOK(t, s, key, 10, sliding)
	if !r.Allowed || r.Remaining != 0 || r.ResetAfter <= 10*time.Second || r.ResetAfter > 20*time.Second {
		t.Errorf("sliding 10: %+v", r)
	}
	d := takeOK(t, s, key, 1, sliding)
	switch {
	case d.Allowed:
		t.Errorf("sliding 11th allowed: %+v", d)
	case d.ResetAfter > 10*time.Second:
		// Same window, so reset = 2P - e and retry = (P - e) + e2 with
		// e2 = P - 9·P/10 = 1 s.
		if d.RetryAfter != d.ResetAfter-9*time.Second {
			t.Errorf("sliding 11th: %+v, want retry = reset - 9s", d)
		}
	default:
		t.Logf("sliding: the window turned between two calls: %+v", d)
	}

	penalty := store.Limit{Algorithm: store.GCRA, Rate: 1, Period: time.Second, Burst: 1, Penalty: 5 * time.Second}
	takeOK(t, s, key, 1, penalty)
	check(t, "penalty denial", takeOK(t, s, key, 1, penalty), want{false, 1, 0, 5 * time.Second, 5 * time.Second, 0})
	r = takeOK(t, s, key, 1, penalty)
	if r.Allowed || r.Remaining != 0 || r.RetryAfter != r.ResetAfter {
		t.Errorf("locked: %+v", r)
	}
	near(t, "locked retry", r.RetryAfter, 5*time.Second)
}

func TestRedisMultiLimitNoCharge(t *testing.T) {
	client := sharedClient(t)
	s := realStore(t, client)
	ctx := context.Background()
	key := "multi:" + strconv.FormatInt(time.Now().UnixNano(), 36)
	gcra := store.Limit{Algorithm: store.GCRA, Rate: 10, Period: time.Minute, Burst: 10}
	log := store.Limit{Algorithm: store.SlidingLog, Rate: 10, Period: time.Minute}
	tight := store.Limit{Algorithm: store.TokenBucket, Rate: 1, Period: time.Hour, Burst: 2, Penalty: time.Minute}
	limits := []store.Limit{gcra, log, tight}
	for i := 0; i < 2; i++ {
		if r := takeOK(t, s, key, 1, limits...); !r.Allowed {
			t.Fatalf("take %d denied: %+v", i, r)
		}
	}
	gcraKey := s.prefix + "{" + hashTag(key) + "}:" + mustID(t, gcra)
	before, err := client.Get(ctx, gcraKey).Result()
	if err != nil {
		t.Fatal(err)
	}
	locked := time.Now() // the lock is set no earlier
	r := takeOK(t, s, key, 1, limits...)
	if r.Allowed || r.Binding != 2 {
		t.Fatalf("third take: %+v, want denied by the token bucket", r)
	}
	near(t, "token bucket retry", r.RetryAfter, time.Hour)
	if r.PerLimit[0].Remaining != 8 || r.PerLimit[1].Remaining != 8 || !r.PerLimit[0].Allowed || !r.PerLimit[1].Allowed {
		t.Errorf("allowed limits of a denied call: %+v, want their peeks (8 left)", r.PerLimit[:2])
	}
	if after, _ := client.Get(ctx, gcraKey).Result(); after != before {
		t.Errorf("gcra state %q -> %q in a denied call", before, after)
	}
	logKey := s.prefix + "{" + hashTag(key) + "}:" + mustID(t, log)
	if c := client.ZCard(ctx, logKey).Val(); c != 2 {
		t.Errorf("log has %d entries, want 2", c)
	}
	lockKey := s.prefix + "{" + hashTag(key) + "}:" + mustID(t, tight) + ":x"
	// As much of the minute as has not passed since the lock was set (Redis
	// rounds up to the millisecond).
	if ttl, low := client.PTTL(ctx, lockKey).Val(), time.Minute-time.Since(locked)-time.Millisecond; ttl < low || ttl > time.Minute {
		t.Errorf("lock PTTL %v, want between %v and 1m", ttl, low)
	}
	keys, err := client.Keys(ctx, s.prefix+"{"+hashTag(key)+"}*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 4 {
		t.Errorf("keys %v, want 3 states and 1 lock", keys)
	}
	for _, k := range keys {
		if ttl := client.PTTL(ctx, k).Val(); ttl <= 0 {
			t.Errorf("key %q PTTL %v", k, ttl)
		}
	}
}

func mustID(tb testing.TB, l store.Limit) string {
	tb.Helper()
	spec, err := l.Spec()
	if err != nil {
		tb.Fatal(err)
	}
	return specID(&spec)
}

// commandStats returns the calls of every command since CONFIG RESETSTAT.
// Redis counts the commands a script runs, so this sees inside the script.
func commandStats(tb testing.TB, client *redis.Client) map[string]int {
	tb.Helper()
	info, err := client.Info(context.Background(), "commandstats").Result()
	if err != nil {
		tb.Fatal(err)
	}
	calls := map[string]int{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok {
			continue
		}
		name = strings.TrimPrefix(name, "cmdstat_")
		// The test's own commands, and a new connection's handshake
		// (go-redis dials again when a pooled connection was dropped).
		if strings.HasPrefix(name, "config") || name == "info" || name == "hello" || strings.HasPrefix(name, "client") {
			continue // the test's own
		}
		n, _ := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
		calls[name] = n
	}
	return calls
}

func resetStats(tb testing.TB, client *redis.Client) {
	tb.Helper()
	if err := client.ConfigResetStat(context.Background()).Err(); err != nil {
		tb.Fatal(err)
	}
}

// One EVALSHA per Take, TIME read inside it, and few commands per limit.
func TestRedisCallsPerTake(t *testing.T) {
	srv := redistest.StartServer(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	t.Cleanup(func() { _ = client.Close() })
	s := realStore(t, client)
	takeOK(t, s, "warm", 0, store.PerSecond(1)) // loads the script

	type calls = map[string]int
	// One limit without a penalty on a string state takes the script's
	// fast path: GET and SET. Others read every state with one MGET.
	cases := []struct {
		l             store.Limit
		allow, deny   calls // commands inside the script, TIME and EVALSHA aside
		allowN, denyN int64
	}{
		{store.Limit{Algorithm: store.GCRA, Rate: 1, Period: time.Minute}, calls{"get": 1, "set": 1}, calls{"get": 1}, 1, 1},
		{store.Limit{Algorithm: store.LeakyBucket, Rate: 1, Period: time.Minute}, calls{"get": 1, "set": 1}, calls{"get": 1}, 2, 1},
		{store.Limit{Algorithm: store.TokenBucket, Rate: 1, Period: time.Minute}, calls{"get": 1, "set": 1}, calls{"get": 1}, 1, 1},
		// a window's first charge sets up its hash (HLEN: earlier windows to drop?); see below for the next ones.
		{store.Limit{Algorithm: store.FixedWindow, Rate: 1, Period: time.Minute}, calls{"hget": 1, "hlen": 1, "hset": 1, "pexpire": 1}, calls{"hget": 1}, 1, 1},
		{store.Limit{Algorithm: store.SlidingWindow, Rate: 1, Period: time.Minute}, calls{"mget": 1, "set": 1}, calls{"mget": 1}, 1, 1},
		// first take: ZRANGE only (empty key); the denial: ZRANGE of the newest member, ZRANGE
		// of the oldest, which is the first live one (none has expired), and ZSCORE for its
		// stamp (the retry).
		{store.Limit{Algorithm: store.SlidingLog, Rate: 1, Period: time.Minute}, calls{"zrange": 1, "zadd": 1, "pexpire": 1}, calls{"zrange": 2, "zscore": 1}, 1, 1},
		{store.Limit{Algorithm: store.GCRA, Rate: 1, Period: time.Minute, Penalty: time.Minute}, calls{"mget": 1, "set": 1}, calls{"mget": 1, "set": 1}, 1, 1},
	}
	for i, c := range cases {
		key := fmt.Sprint("calls", i)
		resetStats(t, client)
		if r := takeOK(t, s, key, c.allowN, c.l); !r.Allowed {
			t.Fatalf("%v: first take denied", c.l)
		}
		got := commandStats(t, client)
		want := calls{"evalsha": 1, "time": 1}
		for k, v := range c.allow {
			want[k] = v
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%v allowed: commands %v, want %v", c.l, got, want)
		}
		resetStats(t, client)
		if r := takeOK(t, s, key, c.denyN, c.l); r.Allowed {
			t.Fatalf("%v: second take allowed", c.l)
		}
		got = commandStats(t, client)
		want = calls{"evalsha": 1, "time": 1}
		for k, v := range c.deny {
			want[k] = v
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%v denied: commands %v, want %v", c.l, got, want)
		}
	}

	// A fixed window's later charges in the same window: HGET and HINCRBY.
	hour := store.Limit{Algorithm: store.FixedWindow, Rate: 5, Period: time.Hour}
	takeOK(t, s, "fixed", 1, hour)
	resetStats(t, client)
	takeOK(t, s, "fixed", 1, hour)
	if got, want := commandStats(t, client), (calls{"evalsha": 1, "time": 1, "hget": 1, "hincrby": 1}); fmt.Sprint(got) != fmt.Sprint(want) &&
		fmt.Sprint(got) != fmt.Sprint(calls{"evalsha": 1, "time": 1, "hget": 1, "hlen": 1, "hset": 1, "pexpire": 1}) { // the hour turned
		t.Errorf("fixed window, second charge: commands %v, want %v", got, want)
	}

	// Six limits, one of each algorithm: still one EVALSHA, one TIME, one
	// MGET (the fixed window's hash is read with HGET).
	resetStats(t, client)
	takeOK(t, s, "all", 1, allAlgorithms()...)
	got := commandStats(t, client)
	want := map[string]int{"evalsha": 1, "time": 1, "mget": 1, "set": 4, "hget": 1, "hlen": 1, "hset": 1, "zrange": 1, "zadd": 1, "pexpire": 2}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("six limits: commands %v, want %v", got, want)
	}
}

// NOSCRIPT after SCRIPT FLUSH or a restart is handled by falling back to EVAL.
func TestRedisScriptLost(t *testing.T) {
	srv := redistest.StartServer(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	t.Cleanup(func() { _ = client.Close() })
	s := realStore(t, client)
	ctx := context.Background()
	l := store.Limit{Algorithm: store.FixedWindow, Rate: 100, Period: time.Hour}
	takeOK(t, s, "k", 1, l)
	if err := client.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	resetStats(t, client)
	if r := takeOK(t, s, "k", 1, l); r.Remaining != 98 && r.Remaining != 99 { // 99 if the hour turned
		t.Errorf("after SCRIPT FLUSH: %+v", r)
	}
	if got := commandStats(t, client); got["eval"] != 1 {
		t.Errorf("after SCRIPT FLUSH: commands %v, want one EVAL", got)
	}
	resetStats(t, client)
	takeOK(t, s, "k", 1, l)
	if got := commandStats(t, client); got["eval"] != 0 || got["evalsha"] != 1 {
		t.Errorf("next take: commands %v, want EVALSHA only", got)
	}

	srv.Restart(t) // empty, without the script
	if r := takeOK(t, s, "k", 1, l); !r.Allowed || r.Remaining != 99 {
		t.Errorf("after restart: %+v", r)
	}
}

// Lua 5.1 limits: unpack stops near 8000 values, so the script batches
// MGET. A full sliding log in one take and hundreds of limits must work.
func TestRedisLargeCalls(t *testing.T) {
	client := sharedClient(t)
	s := realStore(t, client)
	ctx := context.Background()
	key := "large:" + strconv.FormatInt(time.Now().UnixNano(), 36)
	l := store.Limit{Algorithm: store.SlidingLog, Rate: 100_000, Period: time.Minute}
	check(t, "full log", takeOK(t, s, key, 100_000, l), want{true, 100_000, 0, 0, time.Minute, 0})
	logKey := s.prefix + "{" + hashTag(key) + "}:" + mustID(t, l)
	last, err := client.ZRange(ctx, logKey, 0, -1).Result()
	if want := fmt.Sprintf("%016x+%x", 0, 100_000); err != nil || len(last) != 1 || last[0] != want {
		t.Errorf("log %v (%v), want the one member %s", last, err, want)
	}
	if r := takeOK(t, s, key, 1, l); r.Allowed {
		t.Errorf("one more than a full log allowed: %+v", r)
	}

	many := make([]store.Limit, 700) // 1400 string keys to read, with penalties
	for i := range many {
		many[i] = store.Limit{Algorithm: store.GCRA, Rate: int64(i + 2), Period: time.Hour, Penalty: time.Minute}
	}
	r := takeOK(t, s, key, 1, many...)
	if !r.Allowed || len(r.PerLimit) != 700 || r.Binding != 0 || r.Remaining != 1 {
		t.Errorf("700 limits: allowed=%v binding=%d remaining=%d", r.Allowed, r.Binding, r.Remaining)
	}
	r = takeOK(t, s, key, 2, many...)
	if r.Allowed || r.Binding != 0 || r.RetryAfter < time.Minute {
		t.Errorf("700 limits, over the first: allowed=%v binding=%d retry=%v", r.Allowed, r.Binding, r.RetryAfter)
	}
	if n := client.Exists(ctx, s.prefix+"{"+hashTag(key)+"}:"+mustID(t, many[0])+":x").Val(); n != 1 {
		t.Error("no lock for the denying limit")
	}
	if n := client.Exists(ctx, s.prefix+"{"+hashTag(key)+"}:"+mustID(t, many[1])+":x").Val(); n != 0 {
		t.Error("lock for a limit that allowed")
	}
}

// A real Redis Cluster: every Take touches one slot, whatever the mix of
// limits, and different clients spread over the masters.
func TestRedisCluster(t *testing.T) {
	cluster := redistest.SharedCluster(t)
	client := cluster.Client(t)
	s := realStore(t, client)
	ctx := context.Background()
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	limits := allAlgorithms()
	// The GCRA state and its lock must both outlive the checks below on a
	// busy machine: the state's TTL is one emission interval (an hour).
	limits[0].Period, limits[0].Penalty = 5*time.Hour, time.Minute
	masters := map[string]bool{}
	for i := 0; i < 60; i++ {
		key := fmt.Sprintf("cluster:%s:%d", run, i)
		if i%3 == 0 {
			key += "{braces}\n" + strings.Repeat("x", 100) // hashed
		}
		r := takeOK(t, s, key, 1, limits...)
		if !r.Allowed {
			t.Errorf("%q: first take denied: %+v", key, r)
		}
		takeOK(t, s, key, 100, limits...) // denied: sets the lock
		tagged := s.prefix + "{" + hashTag(key) + "}:" + mustID(t, limits[0])
		if n := client.Exists(ctx, tagged, tagged+":x").Val(); n != 2 {
			t.Errorf("%q: %d of state and lock exist", key, n)
		}
		masters[cluster.MasterOf(t, tagged).Addr] = true
	}
	if len(masters) != 3 {
		t.Errorf("keys of 60 clients on %d masters, want all 3", len(masters))
	}
	// Scripts lost on every master are reloaded transparently.
	if err := client.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		return m.ScriptFlush(ctx).Err()
	}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		takeOK(t, s, fmt.Sprintf("cluster:%s:flushed:%d", run, i), 1, limits...)
	}
}

// Exactly Rate requests pass when many goroutines, over several
// connections and two Store instances, race on a real server.
func TestRedisConcurrentExact(t *testing.T) {
	client := sharedClient(t)
	other := realStore(t, redis.NewClient(&redis.Options{Addr: client.Options().Addr, MaxRetries: -1, PoolSize: 4}))
	stores := [2]*Store{realStore(t, client), other}
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	for _, l := range []store.Limit{
		{Algorithm: store.SlidingLog, Rate: 37, Period: time.Hour},
		{Algorithm: store.GCRA, Rate: 37, Period: time.Hour},
		{Algorithm: store.TokenBucket, Rate: 37, Period: time.Hour},
		{Algorithm: store.LeakyBucket, Rate: 1, Period: time.Hour, Burst: 36},
	} {
		key := "race:" + run + ":" + mustID(t, l)
		var allowed atomic.Int64
		var wg sync.WaitGroup
		for g := 0; g < 8; g++ {
			wg.Add(1)
			go func(s *Store) {
				defer wg.Done()
				for i := 0; i < 12; i++ {
					r, err := s.Take(context.Background(), key, 1, specs(l)...)
					if err != nil {
						t.Error(err)
						return
					}
					if r.Allowed {
						allowed.Add(1)
					}
				}
			}(stores[g%2])
		}
		wg.Wait()
		if got := allowed.Load(); got != 37 {
			t.Errorf("%v: %d of 96 allowed, want exactly 37", l, got)
		}
	}
}

// Pitfall 11: go-redis re-sends a command whose reply timed out, and the
// server may run both. The Store itself never re-sends: with MaxRetries -1
// (what New's documentation asks for) a Take whose reply timed out while
// the server was stuck is charged once, when the server resumes.
func TestRedisTimedOutTakeChargedOnce(t *testing.T) {
	srv := redistest.StartServer(t)
	l := store.Limit{Algorithm: store.FixedWindow, Rate: 1000, Period: time.Hour}
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, ReadTimeout: 100 * time.Millisecond})
	t.Cleanup(func() { _ = client.Close() })
	s := realStore(t, client, WithBreaker(0, 0)) // the timeout below would open it
	takeOK(t, s, "stuck", 0, l)                  // connect and load the script while the server runs
	admin := srv.Client(t)
	calls := scriptCalls(t, admin)
	srv.Freeze(t)
	_, err := s.Take(context.Background(), "stuck", 1, specs(l)...)
	srv.Thaw(t)
	if err == nil || !strings.HasPrefix(err.Error(), "redisstore: ") {
		t.Fatalf("Take on a frozen server: %v, want a redisstore error", err)
	}
	// The server runs what it received once it is thawed: the Take's
	// script, once.
	waitScriptCalls(t, admin, calls+1)
	if r := takeOK(t, s, "stuck", 0, l); r.Remaining != 999 {
		t.Errorf("a timed-out Take was charged %d times, want once", 1000-r.Remaining)
	}

	// With ContextTimeoutEnabled the Take's context bounds the wait, far
	// below ReadTimeout: a per-decision deadline holds.
	patient := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, ReadTimeout: 10 * time.Second, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = patient.Close() })
	s = realStore(t, patient)
	takeOK(t, s, "stuck", 0, l)
	srv.Freeze(t)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = s.Take(ctx, "stuck", 1, specs(l)...)
	took := time.Since(start)
	srv.Thaw(t)
	if err == nil || took > 2*time.Second {
		t.Errorf("Take with a 50ms deadline on a frozen server: %v after %v, want an error within the deadline", err, took)
	}
}

// waitScriptCalls waits until the server has run at least n scripts.
func waitScriptCalls(t *testing.T, admin *redis.Client, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		got := scriptCalls(t, admin)
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server ran %d scripts within 10s, want %d", got, n)
		}
	}
}
