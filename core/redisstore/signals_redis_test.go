package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/internal/redistest"
)

// The tests of this file check what an operator sees: Ping as a health
// check, the Store's log lines (slog.Default() unless a test sets its
// own) and Stats.

// logs is a slog.Handler keeping every record of level Info or above.
type logs struct {
	mu   sync.Mutex
	recs []string // "LEVEL message kind=..."
}

func (l *logs) Enabled(_ context.Context, lv slog.Level) bool { return lv >= slog.LevelInfo }

func (l *logs) Handle(_ context.Context, r slog.Record) error {
	s := r.Level.String() + " " + r.Message
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "kind" {
			s += " kind=" + a.Value.String()
		}
		return true
	})
	l.mu.Lock()
	l.recs = append(l.recs, s)
	l.mu.Unlock()
	return nil
}

func (l *logs) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logs) WithGroup(string) slog.Handler      { return l }

func (l *logs) option() redisstore.Option { return redisstore.WithTestLogger(slog.New(l)) }

// count returns how many records contain s.
func (l *logs) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, r := range l.recs {
		if strings.Contains(r, s) {
			n++
		}
	}
	return n
}

func (l *logs) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.recs, "\n")
}

// TestPingFailsOnOOM: Redis at maxmemory under noeviction refuses every
// decision's write; Ping says so, wrapping store.ErrOutOfMemory.
func TestPingFailsOnOOM(t *testing.T) {
	srv := redistest.StartServer(t, "--maxmemory-policy", "noeviction")
	st, err := redisstore.New(srv.Client(t), quiet())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	if err := st.Ping(ctx); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	admin := srv.Client(t)
	if err := admin.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	if err := st.Ping(ctx); !errors.Is(err, store.ErrOutOfMemory) {
		t.Fatalf("Ping at maxmemory: %v, want store.ErrOutOfMemory", err)
	}
	if err := admin.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	if err := st.Ping(ctx); err != nil {
		t.Fatalf("Ping with memory again: %v", err)
	}
}

// TestPingFailsOnLongOpenBreaker: a breaker open for more than 10 s fails
// Ping (every decision of its server is the fallback's), a shorter one
// does not.
func TestPingFailsOnLongOpenBreaker(t *testing.T) {
	srv := redistest.StartServer(t)
	var l logs
	st, err := redisstore.New(redis.NewClient(redisstore.UniversalOptions(srv.Addr).Simple()), l.option(),
		redisstore.WithBreaker(1, 50*time.Millisecond),
		redisstore.WithProbeCheck(func(context.Context) error { return errors.New("held by the test") }))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	limit := store.PerMinute(10)
	srv.Kill(t)
	for redisstore.BreakerState(st, "k", limit) != "open" {
		_, _ = st.Take(context.Background(), "k", 1, specs(limit)...)
	}
	srv.Restart(t)
	if err := st.Ping(context.Background()); err != nil {
		t.Fatalf("Ping with a breaker just opened: %v", err)
	}
	redisstore.AgeBreakers(st, 11*time.Second)
	err = st.Ping(context.Background())
	if err == nil || !strings.Contains(err.Error(), "circuit breaker of "+srv.Addr+" has been open for 11") {
		t.Fatalf("Ping with a breaker open for 11s: %v, want it named", err)
	}
	if got := st.Stats().Breakers; !got[srv.Addr] {
		t.Errorf("Stats().Breakers = %v, want %s open", got, srv.Addr)
	}
	if n := l.count("circuit breaker open"); n != 1 {
		t.Errorf("%d records of the breaker opening, want 1:\n%v", n, &l)
	}
}

// TestEvictionNoticed: keys evicted under traffic are reported while it
// happens (within a few seconds), not only at Ping.
func TestEvictionNoticed(t *testing.T) {
	srv := redistest.StartServer(t, "--maxmemory", "4mb", "--maxmemory-policy", "allkeys-random")
	var l logs
	st, err := redisstore.New(srv.Client(t), l.option()) // the fallback's subscription counts and inspects
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	if err := st.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	if l.count("kind=eviction") != 1 || l.count("kind=evicted") != 0 {
		t.Fatalf("after Ping:\n%v\nwant one eviction policy warning", &l)
	}
	admin := srv.Client(t)
	val := strings.Repeat("x", 4096)
	for i := 0; i < 3000; i++ { // 12 MB into 4: Redis evicts
		if err := admin.Set(ctx, fmt.Sprintf("filler:%d", i), val, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if !redistest.WaitUntil(20*time.Second, func() bool { return l.count("kind=evicted") > 0 }) {
		t.Fatalf("no eviction reported within 20s:\n%v", &l)
	}
	if n := st.Stats().Warnings["evicted"]; n < 1 {
		t.Errorf("Stats().Warnings[evicted] = %d, want at least 1", n)
	}
	if n := l.count("kind=eviction"); n != 1 {
		t.Errorf("the eviction policy reported %d times, want once per server", n)
	}
}

// TestFleetCountUnderMinimalACL: under MinimalACL the Store counts the
// processes sharing Redis; without PUBSUB NUMSUB it cannot, and says so
// (a log line, Stats().Instances 0, Ping naming the command).
func TestFleetCountUnderMinimalACL(t *testing.T) {
	srv := redistest.StartServer(t)
	var stores []*redisstore.Store
	for range 2 {
		st, err := redisstore.New(aclUser(t, srv, "minimal", "sluice:", redisstore.MinimalACL), quiet())
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		if err := st.Ping(context.Background()); err != nil {
			t.Fatalf("Ping as the minimal user: %v", err)
		}
		stores = append(stores, st)
	}
	if !redistest.WaitUntil(10*time.Second, func() bool { return stores[0].Stats().Instances == 2 }) {
		t.Fatalf("Stats().Instances = %d under MinimalACL, want 2", stores[0].Stats().Instances)
	}

	var l logs
	st, err := redisstore.New(aclUser(t, srv, "nonumsub", "sluice:", without("+pubsub|numsub")), l.option())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.Ping(context.Background()); err == nil || !strings.Contains(err.Error(), "PUBSUB NUMSUB") {
		t.Errorf("Ping without PUBSUB NUMSUB: %v, want it named", err)
	}
	if !redistest.WaitUntil(10*time.Second, func() bool { return l.count("kind=fleet") > 0 }) {
		t.Fatalf("no warning that the fleet cannot be counted within 10s:\n%v", &l)
	}
	if n := st.Stats().Instances; n != 0 {
		t.Errorf("Stats().Instances = %d when the count is refused, want 0", n)
	}
	if n := l.count("kind=fleet"); n != 1 {
		t.Errorf("%d fleet warnings, want 1 per episode", n)
	}
}

// TestWrongPasswordIsLoud: a Store whose user Redis refuses decides every
// request locally; it says so once, without the user wiring anything.
func TestWrongPasswordIsLoud(t *testing.T) {
	srv := redistest.StartServer(t)
	aclUser(t, srv, "app", "sluice:", redisstore.MinimalACL)
	opt := redisstore.UniversalOptions(srv.Addr).Simple()
	opt.Username, opt.Password = "app", "wrong"
	client := redis.NewClient(opt)
	defer client.Close()
	var l logs
	st, err := redisstore.New(client, l.option())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for i := 0; i < 30; i++ {
		res, err := st.Take(context.Background(), "k", 1, specs(store.PerMinute(100))...)
		if err != nil || res.Fallback == nil {
			t.Fatalf("Take %d: %+v, %v; want a decision of the fallback", i, res, err)
		}
	}
	if n := l.count("kind=permission"); n != 1 {
		t.Errorf("%d records of Redis refusing the user, want 1:\n%v", n, &l)
	}
	if n := l.count("local fallback decides"); n != 1 {
		t.Errorf("%d records of the fallback deciding, want 1:\n%v", n, &l)
	}
	if st.Stats().Warnings["permission"] != 1 {
		t.Errorf("Stats().Warnings = %v, want one permission", st.Stats().Warnings)
	}
}

// TestFrozenRedis: a Redis that stops answering (SIGSTOP) is logged (the
// breaker opening, the fallback deciding), and Status answers meanwhile.
func TestFrozenRedis(t *testing.T) {
	srv := redistest.StartServer(t)
	var l logs
	st, err := redisstore.New(redis.NewClient(redisstore.UniversalOptions(srv.Addr).Simple()), l.option())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
	limit := store.PerMinute(100)
	lim, err := core.New(st, "api", func(*http.Request) (string, error) { return "client", nil }, []store.Limit{limit})
	if err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest("GET", "/", nil)
	if d := lim.Decide(req); d.Outcome != core.OutcomeAllowed {
		t.Fatalf("before the freeze: %v", d.Outcome)
	}
	srv.Freeze(t)
	defer srv.Thaw(t)
	if !redistest.WaitUntil(15*time.Second, func() bool {
		lim.Decide(req)
		return l.count("circuit breaker open") > 0
	}) {
		t.Fatalf("the breaker did not open within 15s of the freeze:\n%v", &l)
	}
	res, err := lim.Status(req) // answered by the fallback while Redis is away
	if err != nil || res.Fallback == nil {
		t.Errorf("Status while the breaker is open: %+v, %v; want the fallback's answer", res, err)
	}
	if l.count("circuit breaker open") != 1 || l.count("local fallback decides") != 1 {
		t.Errorf("records while frozen:\n%v\nwant the breaker opening and the fallback deciding, once each", &l)
	}
}

// TestDebtsChargedWithoutRequest: once Redis answers again after a period
// of local decisions, what the fallback admitted is charged to Redis
// within 2 s with no request for the key, so that Status (what Redis
// alone says) is exact. The outage is Redis refusing the scripts (a
// permission taken away), so that no call of unknown outcome muddies the
// count.
func TestDebtsChargedWithoutRequest(t *testing.T) {
	srv := redistest.StartServer(t)
	client := aclUser(t, srv, "app", "sluice:", redisstore.MinimalACL)
	var l logs
	st, err := redisstore.New(client, l.option())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	if err := st.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	// A sliding log keeps every admission for the hour (a GCRA's state
	// would expire as it refills).
	limit := store.Limit{Algorithm: store.SlidingLog, Rate: 100, Period: time.Hour}
	key := func(*http.Request) (string, error) { return "client", nil }
	lim, err := core.New(st, "api", key, []store.Limit{limit})
	if err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest("GET", "/", nil)
	for i := 0; i < 3; i++ { // Redis decides
		if d := lim.Decide(req); d.Outcome != core.OutcomeAllowed {
			t.Fatalf("before the outage: %v", d.Outcome)
		}
	}
	admin := srv.Client(t)
	if err := admin.Do(ctx, "acl", "setuser", "app", "-evalsha", "-eval").Err(); err != nil {
		t.Fatal(err)
	}
	local := 0
	for local < 8 {
		if d := lim.Decide(req); d.Outcome == core.OutcomeFallback {
			local++
		} else {
			t.Fatalf("while Redis refuses the scripts: %v", d.Outcome)
		}
	}
	if err := admin.Do(ctx, "acl", "setuser", "app", "+evalsha", "+eval").Err(); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	bare, err := redisstore.New(admin, redisstore.Bare()...)
	if err != nil {
		t.Fatal(err)
	}
	defer bare.Close()
	exact, err := core.New(bare, "api", key, []store.Limit{limit}) // what Redis alone says
	if err != nil {
		t.Fatal(err)
	}
	want := limit.Rate - int64(3+local)
	var got int64
	// Only the fallback's background pass can charge: no request follows.
	ok := redistest.WaitUntil(10*time.Second, func() bool {
		r, err := exact.Status(req)
		got = r.Remaining
		return err == nil && got == want
	})
	took := time.Since(back)
	t.Logf("%d decided locally; Redis charged %v after it answered", local, took.Round(time.Millisecond))
	if !ok {
		t.Fatalf("Redis' remaining %d 10s after it answered, want %d (3 decided by Redis, %d by the fallback)\n%v", got, want, local, &l)
	}
	if took > 2*time.Second {
		t.Errorf("the fallback's admissions reached Redis %v after it answered, want within 2s", took)
	}
}

// Ping works on miniredis (what a user's unit tests run on), whose Lua
// knows no shebang: the memory check is then skipped.
func TestPingOnMiniredis(t *testing.T) {
	m := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1})
	defer client.Close()
	st, err := redisstore.New(client, quiet())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.Ping(context.Background()); err != nil {
		t.Fatalf("Ping on miniredis: %v", err)
	}
}
