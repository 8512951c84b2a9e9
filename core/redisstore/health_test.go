package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/internal/redistest"
)

var perMinute10 = store.PerMinute(10)

func miniStore(t *testing.T, opts ...redisstore.Option) (*miniredis.Miniredis, *redisstore.Store) {
	t.Helper()
	m := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = client.Close() })
	st, err := redisstore.New(client, append(redisstore.Bare(), opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return m, st
}

func take(st *redisstore.Store, key string) error {
	_, err := st.Take(context.Background(), key, 1, specs(perMinute10)...)
	return err
}

func wantState(t *testing.T, st *redisstore.Store, key, want string) {
	t.Helper()
	if got := redisstore.BreakerState(st, key, perMinute10); got != want {
		t.Fatalf("breaker %s, want %s", got, want)
	}
}

// The breaker opens on the threshold-th consecutive failure; then Takes
// fail with ErrBreakerOpen without a command reaching Redis. Failures
// split by a success, and calls whose caller went away, do not count.
func TestBreakerOpensAfterConsecutiveFailures(t *testing.T) {
	m, st := miniStore(t, redisstore.WithBreaker(3, time.Hour))
	m.SetError("ERR injected")
	for i := 0; i < 2; i++ {
		if err := take(st, "a"); err == nil || errors.Is(err, store.ErrBreakerOpen) {
			t.Fatalf("failure %d: %v, want the server's error", i+1, err)
		}
	}
	m.SetError("")
	if err := take(st, "a"); err != nil {
		t.Fatal(err)
	}
	m.SetError("ERR injected")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for i := 0; i < 5; i++ {
		_, _ = st.Take(ctx, "a", 1, specs(perMinute10)...) // the caller went away
	}
	for i := 0; i < 2; i++ {
		_ = take(st, "a")
	}
	wantState(t, st, "a", "closed")
	if err := take(st, "a"); errors.Is(err, store.ErrBreakerOpen) {
		t.Fatalf("third consecutive failure: %v, want the server's error", err)
	}
	wantState(t, st, "a", "open")
	before := m.CommandCount()
	for _, key := range []string{"a", "b", "c"} {
		if err := take(st, key); !errors.Is(err, store.ErrBreakerOpen) {
			t.Fatalf("open breaker: %v, want ErrBreakerOpen", err)
		}
		if _, err := st.Peek(context.Background(), key, 1, specs(perMinute10)...); !errors.Is(err, store.ErrBreakerOpen) {
			t.Fatalf("open breaker, Peek: %v, want ErrBreakerOpen", err)
		}
	}
	if n := m.CommandCount() - before; n != 0 {
		t.Errorf("%d commands reached Redis with the breaker open", n)
	}
}

// A server that stops answering (frozen, or every command held by CLIENT
// PAUSE) opens the breaker once failures calls sent to it have timed out,
// not at the first.
func TestBreakerOpensOnServerThatStopsAnswering(t *testing.T) {
	redistest.Slow(t)
	const failures = 3
	for _, c := range []struct {
		name string
		stop func(*testing.T, *redistest.Server)
	}{
		{"frozen", func(t *testing.T, srv *redistest.Server) { srv.Freeze(t) }},
		{"CLIENT PAUSE ALL", func(t *testing.T, srv *redistest.Server) { srv.Pause(t, time.Hour) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := redistest.StartServer(t)
			st := realStore(t, srv.Addr, redisstore.WithBreaker(failures, time.Hour))
			if err := take(st, "a"); err != nil {
				t.Fatal(err)
			}
			c.stop(t, srv)
			for i := 1; i <= failures; i++ {
				// A deadline a busy machine cannot eat up before the call
				// is on the wire (one that expires unsent, or sent late,
				// is no evidence against the server).
				ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
				_, err := st.Take(ctx, "a", 1, specs(perMinute10)...)
				cancel()
				if errKind(err) != "timeout" {
					t.Fatalf("call %d to a server that stopped answering: %v, want a timeout", i, err)
				}
				if want := map[bool]string{true: "open", false: "closed"}[i == failures]; redisstore.BreakerState(st, "a", perMinute10) != want {
					t.Fatalf("after %d timeouts of %d: breaker %s, want %s", i, failures, redisstore.BreakerState(st, "a", perMinute10), want)
				}
			}
			if err := take(st, "b"); !errors.Is(err, store.ErrBreakerOpen) {
				t.Fatalf("after %d timeouts: %v, want ErrBreakerOpen", failures, err)
			}
		})
	}
}

// A refused connection (the server killed) opens the breaker at once,
// whatever the threshold.
func TestBreakerOpensOnRefusedConnection(t *testing.T) {
	srv := redistest.StartServer(t)
	st := realStore(t, srv.Addr, redisstore.WithBreaker(100, time.Hour))
	if err := take(st, "a"); err != nil {
		t.Fatal(err)
	}
	srv.Kill(t)
	if err := take(st, "a"); err == nil || errors.Is(err, store.ErrBreakerOpen) {
		t.Fatalf("dead server: %v, want a connection error", err)
	}
	wantState(t, st, "a", "open")
}

func realStore(t *testing.T, addr string, opts ...redisstore.Option) *redisstore.Store {
	t.Helper()
	client := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ContextTimeoutEnabled: true,
		DialTimeout: time.Second, DialerRetries: 1})
	t.Cleanup(func() { _ = client.Close() })
	st, err := redisstore.New(client, append(redisstore.Bare(), opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// An open breaker is probed in the background, without traffic: once Redis
// is back, the breaker closes, and the scripts are loaded before it does.
func TestBreakerProbesInBackground(t *testing.T) {
	srv := redistest.StartServer(t)
	st := realStore(t, srv.Addr, redisstore.WithBreaker(1, 20*time.Millisecond))
	srv.Kill(t)
	if err := take(st, "a"); err == nil || errors.Is(err, store.ErrBreakerOpen) {
		t.Fatalf("dead server: %v, want a connection error", err)
	}
	wantState(t, st, "a", "open")
	srv.Restart(t)
	deadline := time.Now().Add(10 * time.Second)
	for redisstore.BreakerState(st, "a", perMinute10) != "closed" {
		if time.Now().After(deadline) {
			t.Fatal("breaker still open 10s after Redis came back, without traffic")
		}
		time.Sleep(5 * time.Millisecond)
	}
	admin := srv.Client(t)
	sha := redis.NewScript(redisstore.TakeSource).Hash()
	if ok, err := admin.ScriptExists(context.Background(), sha).Result(); err != nil || !ok[0] {
		t.Fatalf("script loaded when the breaker closed: %v %v, want true", ok, err)
	}
	if err := take(st, "a"); err != nil {
		t.Fatalf("after the probe: %v", err)
	}
}

// While a probe waits for Redis, Takes fail at once instead of waiting
// for it; when it is answered, the breaker closes and Takes go to Redis.
func TestBreakerFailsFastWhileProbing(t *testing.T) {
	entered, release := make(chan struct{}, 1), make(chan struct{})
	check := func(ctx context.Context) error {
		select {
		case entered <- struct{}{}:
		default:
		}
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	m, st := miniStore(t, redisstore.WithBreaker(1, 5*time.Millisecond), redisstore.WithProbeCheck(check))
	m.SetError("ERR injected")
	_ = take(st, "a")
	wantState(t, st, "a", "open")
	m.SetError("")
	<-entered
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	if _, err := st.Take(ctx, "a", 1, specs(perMinute10)...); !errors.Is(err, store.ErrBreakerOpen) {
		t.Fatalf("while the probe waits: %v, want ErrBreakerOpen at once", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("a Take waited %v for the probe", d)
	}
	close(release)
	deadline := time.Now().Add(10 * time.Second)
	for redisstore.BreakerState(st, "a", perMinute10) != "closed" {
		if time.Now().After(deadline) {
			t.Fatal("breaker still open 10s after the probe's check passed")
		}
		time.Sleep(time.Millisecond)
	}
	if err := take(st, "a"); err != nil {
		t.Fatalf("after the probe: %v, want a decision from Redis", err)
	}
}

// Six Limiters on one Store share its breaker: when Redis dies, one request
// in all reaches it (the refused connection opens the breaker), or, with
// go-redis' default dial retries, which hide the refusal behind the
// deadline, DefaultBreakerFailures requests wait out the per-decision
// timeout; every later one fails at once.
func TestBreakerSharedByLimiters(t *testing.T) {
	redistest.Slow(t)
	for _, c := range []struct {
		name     string
		opts     redis.Options
		timeouts int // at most
		failures int // at most, before the breaker opens
	}{
		// go-redis waits DialerRetryTimeout (100ms) after every failed dial,
		// and the caller sees its deadline run out, not the refusal: a dead
		// server then looks like a frozen one.
		{"go-redis dial defaults", redis.Options{MaxRetries: -1, ContextTimeoutEnabled: true},
			redisstore.DefaultBreakerFailures, redisstore.DefaultBreakerFailures},
		{"dials that fail fast", redis.Options{MaxRetries: -1, ContextTimeoutEnabled: true,
			DialTimeout: 500 * time.Millisecond, DialerRetries: 1, DialerRetryTimeout: time.Millisecond},
			0, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			// A call that waited for this process (a stall of a fifth of
			// its time: see fairTry) is no evidence against the server,
			// so on a busy machine more calls than the threshold may wait
			// out the timeout: such a run is tried again, three times at
			// most.
			for attempt := 1; ; attempt++ {
				counts, lastErr, stalled := breakerRun(t, c.opts)
				t.Logf("attempt %d: errors by kind: %v; last of each: %v; this process stalled for up to %v",
					attempt, counts, lastErr, stalled.Round(time.Millisecond))
				var bad []string
				if counts["timeout"] > c.timeouts {
					bad = append(bad, fmt.Sprintf("%d requests waited out the timeout, want at most %d", counts["timeout"], c.timeouts))
				}
				if n := counts["timeout"] + counts["error"]; n > c.failures {
					bad = append(bad, fmt.Sprintf("%d requests reached the dead server, want at most %d", n, c.failures))
				}
				if counts["breaker"] < 60-c.failures {
					bad = append(bad, fmt.Sprintf("%d of 60 failed at once, want at least %d", counts["breaker"], 60-c.failures))
				}
				switch {
				case len(bad) == 0:
					return
				case stalled < redisstore.DefaultTimeout/5:
					t.Fatal(strings.Join(bad, "; "))
				case attempt == 3:
					t.Logf("the machine was too busy to judge in three attempts: %s", strings.Join(bad, "; "))
					return
				}
				time.Sleep(time.Second) // a moment for the machine to calm down
			}
		})
	}
}

// breakerRun makes six Limiters share a Store on a fresh redis-server
// with the client options opts, kills the server, and sends 60 requests
// through them in turn; it returns the errors by kind, the last of each,
// and the longest this process stalled meanwhile.
func breakerRun(t *testing.T, opts redis.Options) (map[string]int, map[string]error, time.Duration) {
	srv := redistest.StartServer(t)
	opts.Addr = srv.Addr
	client := redis.NewClient(&opts)
	defer client.Close()
	st, err := redisstore.New(client)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	counts, lastErr := map[string]int{}, map[string]error{}
	var limiters []*core.Limiter
	for i := 0; i < 6; i++ {
		l, err := core.New(st, fmt.Sprint("route-", i), clientKey, []store.Limit{perMinute10},
			core.WithObserver(func(ev core.Event) {
				counts[errKind(ev.Err)]++
				lastErr[errKind(ev.Err)] = ev.Err
			}))
		if err != nil {
			t.Fatal(err)
		}
		l.Decide(requestFrom("warm-up"))
		limiters = append(limiters, l)
	}
	clear(counts)
	srv.Kill(t)
	stalled := watchStalls()
	for i := 0; i < 60; i++ {
		limiters[i%6].Decide(requestFrom("alice"))
	}
	return counts, lastErr, stalled()
}

func errKind(err error) string {
	switch {
	case err == nil:
		return "none"
	case errors.Is(err, store.ErrBreakerOpen):
		return "breaker"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return "timeout"
	}
	return "error"
}

func TestWithBreakerRejectsBadSettings(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer client.Close()
	for _, o := range []redisstore.Option{
		redisstore.WithBreaker(-1, time.Second),
		redisstore.WithBreaker(1<<30+1, time.Second),
		redisstore.WithBreaker(3, 0),
		redisstore.WithBreaker(3, 2*time.Hour),
	} {
		if _, err := redisstore.New(client, o); err == nil {
			t.Errorf("bad breaker settings accepted")
		}
	}
	if _, err := redisstore.New(client, redisstore.WithBreaker(0, 0)); err != nil {
		t.Errorf("WithBreaker(0, 0) (off): %v", err)
	}
}

// With the breaker off every call goes to Redis.
func TestBreakerOff(t *testing.T) {
	m, st := miniStore(t, redisstore.WithBreaker(0, 0))
	m.SetError("ERR injected")
	for i := 0; i < 20; i++ {
		if err := take(st, "a"); err == nil || errors.Is(err, store.ErrBreakerOpen) {
			t.Fatalf("breaker off, call %d: %v, want the server's error", i, err)
		}
	}
}

// Ping reports a database that does not exist: the server's error, which
// will not heal by waiting.
func TestPingReportsConfigurationErrors(t *testing.T) {
	srv := redistest.StartServer(t)
	st := realStore(t, srv.Addr)
	if err := st.Ping(context.Background()); err != nil {
		t.Fatalf("healthy server: %v", err)
	}
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, DB: 99, MaxRetries: -1})
	defer client.Close()
	bad, err := redisstore.New(client)
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	err = bad.Ping(context.Background())
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		t.Fatalf("database 99: %v, want the server's error (redis.Error)", err)
	}
	t.Logf("database 99: %v", err)
}
