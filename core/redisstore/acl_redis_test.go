package redisstore_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/core/storetest"
	"github.com/sluicehq/sluice/internal/redistest"
)

// aclUser creates user on srv with rules (MinimalACL's syntax, its
// "sluice:" replaced by prefix) and returns a client that logs in as it.
func aclUser(tb testing.TB, srv *redistest.Server, user, prefix, rules string) *redis.Client {
	tb.Helper()
	args := []any{"acl", "setuser", user, "reset"}
	for _, r := range strings.Fields(strings.ReplaceAll(rules, "sluice:", prefix)) {
		args = append(args, r)
	}
	if err := srv.Client(tb).Do(context.Background(), args...).Err(); err != nil {
		tb.Fatalf("ACL SETUSER %s: %v", user, err)
	}
	opt := redisstore.UniversalOptions(srv.Addr).Simple()
	opt.Username, opt.Password = user, "password"
	c := redis.NewClient(opt)
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// without returns MinimalACL without the rule rule.
func without(rule string) string {
	return strings.Replace(redisstore.MinimalACL, " "+rule+" ", " ", 1)
}

// TestPingACL: for each permission the Store needs, a user lacking it
// fails Ping with an error naming it, at once.
func TestPingACL(t *testing.T) {
	srv := redistest.StartServer(t)
	const prefix = "acl:"
	cases := []struct{ acl, want string }{
		{redisstore.MinimalACL, ""},
		{without("+script|load"), ""}, // optional: EVAL serves
		{without("~sluice:*") + " ~other:*", "GET " + prefix + "{=ping}"},
		{without("&sluice:reset") + " &other", "PUBLISH " + prefix + "reset"},
		{without("+ping"), "'ping'"},
		{without("+eval"), "EVAL"},
	}
	for _, cmd := range []string{"evalsha", "time", "get", "set", "mget", "del", "hget", "hset", "hincrby",
		"hdel", "hkeys", "hlen", "pexpire", "zadd", "zcount", "zrange", "zrangebyscore",
		"zremrangebyrank", "zrem", "zscore", "publish", "subscribe", "pubsub|numsub"} {
		cases = append(cases, struct{ acl, want string }{without("+" + cmd), strings.ReplaceAll(strings.ToUpper(cmd), "|", " ") + " "})
	}
	for i, c := range cases {
		st, err := redisstore.New(aclUser(t, srv, "u"+string(rune('a'+i)), prefix, c.acl),
			redisstore.WithPrefix(prefix), quiet())
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		start := time.Now()
		err = st.Ping(ctx)
		cancel()
		_ = st.Close()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%q: Ping: %v", c.acl, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%q: Ping = %v, want an error naming %q", c.acl, err, c.want)
		case c.want != "" && c.want != "'ping'" && !errors.Is(err, redisstore.ErrPermission):
			t.Errorf("%q: Ping = %v, want it to wrap ErrPermission", c.acl, err)
		case time.Since(start) > 3*time.Second:
			t.Errorf("%q: Ping took %v", c.acl, time.Since(start))
		}
		if i < 5 {
			t.Logf("%s -> %v", c.want, err)
		}
	}
}

// TestConformanceMinimalACL runs the conformance suite as a user with
// MinimalACL's permissions only.
func TestConformanceMinimalACL(t *testing.T) {
	redistest.Slow(t)
	srv := redistest.StartServer(t)
	prefix := conformancePrefix(t)
	admin := srv.Client(t)
	aclUser(t, srv, "sluice", prefix, redisstore.MinimalACL)
	storetest.Run(t, storetest.Harness{
		NewStore: func(tb testing.TB) store.Store {
			opt := redisstore.UniversalOptions(srv.Addr).Simple()
			opt.Username, opt.Password = "sluice", "password"
			client := redis.NewClient(opt)
			tb.Cleanup(func() { _ = client.Close() })
			s := newStore(tb, client, prefix)
			if err := s.(*redisstore.Store).Ping(context.Background()); err != nil {
				tb.Fatalf("Ping as the minimal user: %v", err)
			}
			return s
		},
		Keys:         func(tb testing.TB) []storetest.KeyTTL { return listKeys(tb, admin, prefix) },
		FlushScripts: func(tb testing.TB) { flushScripts(tb, admin) },
	})
}

// warnings collects a Store's warnings: a slog.Handler keeping the
// records of level Warn that have a kind.
type warnings struct {
	mu sync.Mutex
	ws []string // "kind: message"
}

func (w *warnings) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }

func (w *warnings) Handle(_ context.Context, r slog.Record) error {
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "kind" {
			w.mu.Lock()
			w.ws = append(w.ws, a.Value.String()+": "+r.Message)
			w.mu.Unlock()
		}
		return true
	})
	return nil
}

func (w *warnings) WithAttrs([]slog.Attr) slog.Handler { return w }
func (w *warnings) WithGroup(string) slog.Handler      { return w }

// option makes a Store log its warnings to w.
func (w *warnings) option() redisstore.Option { return redisstore.WithTestLogger(slog.New(w)) }

// quiet is a Store option that drops its warnings.
func quiet() redisstore.Option { return redisstore.WithTestLogger(slog.New(slog.DiscardHandler)) }

func (w *warnings) kinds() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, x := range w.ws {
		k, _, _ := strings.Cut(x, ":")
		out = append(out, k)
	}
	return out
}

// TestPingWarnsOfEviction: Ping warns when Redis may evict the Store's
// keys, and only then.
func TestPingWarnsOfEviction(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru"}, "eviction"},
		{[]string{"--maxmemory", "64mb", "--maxmemory-policy", "volatile-lru"}, "eviction"},
		{[]string{"--maxmemory", "64mb", "--maxmemory-policy", "noeviction"}, ""},
		{[]string{"--maxmemory", "0", "--maxmemory-policy", "allkeys-lru"}, ""}, // no limit: nothing evicted
	} {
		srv := redistest.StartServer(t, c.args...)
		var w warnings
		st, err := redisstore.New(srv.Client(t), w.option())
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Ping(context.Background()); err != nil {
			t.Fatalf("%v: Ping: %v", c.args, err)
		}
		got := strings.Join(w.kinds(), ",")
		if got != c.want {
			t.Errorf("%v: warnings %q (%v), want %q", c.args, got, w.ws, c.want)
		}
		t.Logf("%v: %v", c.args, w.ws)
		_ = st.Close()
	}
}

// TestOOMError: a Take that Redis refuses for lack of memory fails with
// an error wrapping store.ErrOutOfMemory.
func TestOOMError(t *testing.T) {
	srv := redistest.StartServer(t, "--maxmemory-policy", "noeviction")
	st, err := redisstore.New(srv.Client(t), redisstore.Bare()...)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := srv.Client(t).ConfigSet(context.Background(), "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	for _, l := range []store.Limit{store.PerMinute(10), {Algorithm: store.FixedWindow, Rate: 5, Period: time.Minute}} {
		_, err = st.Take(context.Background(), "oom", 1, specs(l)...)
		if !errors.Is(err, store.ErrOutOfMemory) {
			t.Errorf("%v: Take = %v, want store.ErrOutOfMemory", l, err)
		}
	}
}

// TestRestartReported: a restart of Redis is reported once the Store's
// subscription is back, and the scripts' loss also triggers the check.
func TestRestartReported(t *testing.T) {
	srv := redistest.StartServer(t)
	var w warnings
	st, err := redisstore.New(redis.NewClient(redisstore.UniversalOptions(srv.Addr).Simple()),
		w.option(), redisstore.WithBreaker(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
	srv.Restart(t)
	deadline := time.Now().Add(15 * time.Second)
	for !strings.Contains(strings.Join(w.kinds(), ","), "restart") {
		if time.Now().After(deadline) {
			t.Fatalf("no restart reported within 15s: %v", w.ws)
		}
		_, _ = st.Take(context.Background(), "k", 1, specs(store.PerMinute(10))...)
		time.Sleep(50 * time.Millisecond)
	}
	if got := w.kinds(); len(got) != 1 {
		t.Errorf("warnings %v, want one restart", w.ws)
	}
	t.Logf("%v", w.ws)
}

// TestResubscribeKeepsFallback: when the subscription comes back while
// the breaker is still open, the fallback is not told "" (everything may
// have been reset) until the breaker has closed, so it keeps its locks
// while it decides.
func TestResubscribeKeepsFallback(t *testing.T) {
	srv := redistest.StartServer(t)
	var hold atomic.Bool
	hold.Store(true)
	probe := redis.NewClient(redisstore.UniversalOptions(srv.Addr).Simple())
	defer probe.Close()
	var w warnings
	st, err := redisstore.New(redis.NewClient(redisstore.UniversalOptions(srv.Addr).Simple()),
		redisstore.WithBreaker(1, 50*time.Millisecond), w.option(),
		redisstore.WithProbeCheck(func(ctx context.Context) error {
			if hold.Load() {
				return errors.New("held by the test")
			}
			return probe.Ping(ctx).Err()
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	clears := redisstore.CountClears(st)
	if err := st.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
	first := clears.Load() // the first subscription's
	srv.Kill(t)
	limit := store.PerMinute(10)
	for redisstore.BreakerState(st, "k", limit) != "open" {
		_, _ = st.Take(context.Background(), "k", 1, specs(limit)...)
	}
	srv.Restart(t)
	// The subscription comes back within its 250 ms back-off, while the
	// probe is held: the Store holds its "" back.
	redisstore.WaitPendingClear(t, st, 10*time.Second)
	if got := clears.Load(); got != first {
		t.Fatalf("the fallback was told \"\" %d times while the breaker was open", got-first)
	}
	hold.Store(false)
	deadline := time.Now().Add(10 * time.Second)
	for clears.Load() == first {
		if time.Now().After(deadline) {
			t.Fatalf("breaker %s, the fallback not told \"\" within 10s of the probe's release",
				redisstore.BreakerState(st, "k", limit))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := clears.Load() - first; got != 1 {
		t.Errorf("the fallback was told \"\" %d times after the breaker closed, want 1", got)
	}
	if !strings.Contains(strings.Join(w.kinds(), ","), "restart") {
		t.Errorf("warnings %v, want a restart", w.ws)
	}
}

// TestResetWithoutPublish: a Reset whose announcement Redis refuses says
// that the state was deleted and what was not done.
func TestResetWithoutPublish(t *testing.T) {
	srv := redistest.StartServer(t)
	st, err := redisstore.New(aclUser(t, srv, "nopub", "sluice:", without("+publish")))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	limit := specs(store.PerMinute(10))
	if _, err := st.Take(context.Background(), "k", 10, limit...); err != nil {
		t.Fatal(err)
	}
	err = st.Reset(context.Background(), "k", limit...)
	if err == nil || !strings.Contains(err.Error(), "deleted") || !strings.Contains(err.Error(), "not announced") {
		t.Fatalf("Reset = %v, want an error saying the state was deleted but not announced", err)
	}
	if r, err := st.Take(context.Background(), "k", 10, limit...); err != nil || !r.Allowed {
		t.Errorf("after the Reset: %+v, %v; want the key's state gone", r, err)
	}
	t.Log(err)
}

// TestNoKeyWithoutTTL: a user without PEXPIRE (whom Ping refuses) gets
// errors from fixed_window and sliding_log Takes, and no key is left
// without a TTL: a key the call created goes, one that existed keeps its
// own TTL and its count.
func TestNoKeyWithoutTTL(t *testing.T) {
	srv := redistest.StartServer(t)
	admin := srv.Client(t)
	full, err := redisstore.New(admin)
	if err != nil {
		t.Fatal(err)
	}
	defer full.Close()
	st, err := redisstore.New(aclUser(t, srv, "noexpire", "sluice:", without("+pexpire")), redisstore.Bare()...)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	if err := st.Ping(ctx); err == nil || !strings.Contains(err.Error(), "PEXPIRE") {
		t.Errorf("Ping = %v, want an error naming PEXPIRE", err)
	}
	fixed := store.Limit{Algorithm: store.FixedWindow, Rate: 5, Period: time.Minute}
	log := store.Limit{Algorithm: store.SlidingLog, Rate: 5, Period: time.Minute}
	penalized := func(l store.Limit) store.Limit { l.Penalty = time.Minute; return l }
	for _, l := range []store.Limit{fixed, log, penalized(fixed), penalized(log)} {
		for _, key := range []string{"new", "old"} {
			if key == "old" { // a log with a member, its TTL set by a full user
				if _, err := full.Take(ctx, key+l.String(), 1, specs(l)...); err != nil {
					t.Fatal(err)
				}
			}
			_, err := st.Take(ctx, key+l.String(), 1, specs(l)...)
			// A fixed window's second charge in a window sets no TTL.
			if ok := key == "old" && l.Algorithm == store.FixedWindow; (err == nil) != ok {
				t.Errorf("%v, %s key: Take without PEXPIRE: %v", l, key, err)
			}
		}
	}
	keys := listKeys(t, admin, "sluice:")
	for _, k := range keys {
		if k.TTL < 0 {
			t.Errorf("key %s has no TTL", k.Key)
		}
	}
	if len(keys) != 4 { // the "old" keys only
		t.Errorf("keys %v, want the 4 made by the full user", keys)
	}
	if r, err := full.Peek(ctx, "old"+log.String(), 1, specs(log)...); err != nil || r.Remaining != 3 {
		t.Errorf("the old log after the failed Take: %+v, %v; want its one member kept", r, err)
	}
}

// TestPingACLCluster: on a Cluster, Ping checks every master, and the
// minimal user (with its Cluster commands) passes.
func TestPingACLCluster(t *testing.T) {
	cluster := redistest.SharedCluster(t)
	prefix := conformancePrefix(t)
	user := strings.TrimSuffix(prefix, ":")
	for _, c := range []struct{ acl, want string }{
		{redisstore.MinimalACL, ""},
		{without("+hset"), "HSET " + prefix},
	} {
		client := clusterUser(t, cluster, user, prefix, c.acl)
		st, err := redisstore.New(client, redisstore.WithPrefix(prefix), quiet())
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = st.Ping(ctx)
		cancel()
		_ = st.Close()
		_ = client.Close()
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%q: Ping = %v, want %q", c.acl, err, c.want)
		}
		t.Logf("%q: %v", c.want, err)
	}
}

// clusterUser creates user on every node of cluster with rules (see
// aclUser) and returns a Cluster client that logs in as it.
func clusterUser(tb testing.TB, cluster *redistest.Cluster, user, prefix, rules string) redis.UniversalClient {
	tb.Helper()
	args := []any{"acl", "setuser", user, "reset"}
	for _, r := range strings.Fields(strings.ReplaceAll(rules, "sluice:", prefix)) {
		args = append(args, r)
	}
	for _, addr := range cluster.Addrs {
		admin := redis.NewClient(&redis.Options{Addr: addr})
		err := admin.Do(context.Background(), args...).Err()
		_ = admin.Close()
		if err != nil {
			tb.Fatalf("ACL SETUSER on %s: %v", addr, err)
		}
	}
	opt := redisstore.UniversalOptions(cluster.Addrs...)
	opt.Username, opt.Password = user, "password"
	return redis.NewUniversalClient(opt)
}

// TestConformanceMinimalACLCluster runs the conformance suite on a
// Cluster as a user with MinimalACL's permissions only.
func TestConformanceMinimalACLCluster(t *testing.T) {
	redistest.Slow(t)
	t.Parallel()
	cluster := redistest.SharedCluster(t)
	prefix := conformancePrefix(t)
	user := strings.TrimSuffix(prefix, ":")
	clusterUser(t, cluster, user, prefix, redisstore.MinimalACL).Close()
	admin := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs, MaxRetries: -1})
	defer admin.Close()
	storetest.Run(t, storetest.Harness{
		NewStore: func(tb testing.TB) store.Store {
			opt := redisstore.UniversalOptions(cluster.Addrs...)
			opt.Username, opt.Password = user, "password"
			client := redis.NewUniversalClient(opt)
			tb.Cleanup(func() { _ = client.Close() })
			s := newStore(tb, client, prefix)
			if err := s.(*redisstore.Store).Ping(context.Background()); err != nil {
				tb.Fatalf("Ping as the minimal user: %v", err)
			}
			return s
		},
		Keys:         func(tb testing.TB) []storetest.KeyTTL { return listKeys(tb, admin, prefix) },
		FlushScripts: func(tb testing.TB) { flushScripts(tb, admin) },
	})
}

// TestFallbackKeepsLockAcrossResubscription is issue 18's restart: a
// client locked out by a penalty in the Limiter's fallback (Redis killed)
// stays locked out when Redis comes back and the Store subscribes again
// while its breaker is still open.
func TestFallbackKeepsLockAcrossResubscription(t *testing.T) {
	srv := redistest.StartServer(t)
	var hold atomic.Bool
	hold.Store(true)
	probe := redis.NewClient(redisstore.UniversalOptions(srv.Addr).Simple())
	defer probe.Close()
	st, err := redisstore.New(redis.NewClient(redisstore.UniversalOptions(srv.Addr).Simple()),
		redisstore.WithBreaker(1, 50*time.Millisecond), quiet(),
		redisstore.WithTimeout(time.Second),
		redisstore.WithProbeCheck(func(ctx context.Context) error {
			if hold.Load() {
				return errors.New("held by the test")
			}
			return probe.Ping(ctx).Err()
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	limit := store.PerMinute(1)
	limit.Penalty = 5 * time.Minute
	l, err := core.New(st, "test", func(*http.Request) (string, error) { return "client", nil }, []store.Limit{limit})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
	decide := func() core.Decision { return l.Decide(httptest.NewRequest(http.MethodGet, "/", nil)) }
	srv.Kill(t)
	for redisstore.BreakerState(st, "k", limit) != "open" {
		decide()
	}
	for i := 0; i < 3; i++ { // the fallback allows one, then locks the client out
		decide()
	}
	if d := decide(); d.Action != core.Refuse || d.Outcome != core.OutcomeFallback {
		t.Fatalf("before the restart: %v %v, want refused by the fallback", d.Action, d.Outcome)
	}
	srv.Restart(t)
	// The subscription is back (250 ms back-off), the probe held.
	redisstore.WaitPendingClear(t, st, 10*time.Second)
	if d := decide(); d.Action != core.Refuse {
		t.Errorf("after the re-subscription: %v %v, want still refused by the fallback", d.Action, d.Outcome)
	}
}
