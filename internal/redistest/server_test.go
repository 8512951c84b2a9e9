package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestStartServerKillRestart(t *testing.T) {
	Slow(t)
	t.Parallel()
	ctx := context.Background()
	s := StartServer(t, "--maxmemory", "1mb")
	rdb := s.Client(t)

	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING: %v", err)
	}
	if !strings.HasPrefix(s.Addr, "127.0.0.1:") {
		t.Errorf("Addr = %q, want 127.0.0.1:port", s.Addr)
	}
	wantConfig := map[string]string{"save": "", "appendonly": "no", "maxmemory": "1048576", "bind": "127.0.0.1"}
	for name, want := range wantConfig {
		got, err := rdb.ConfigGet(ctx, name).Result()
		if err != nil {
			t.Fatalf("CONFIG GET %s: %v", name, err)
		}
		if got[name] != want {
			t.Errorf("CONFIG GET %s = %q, want %q", name, got[name], want)
		}
	}
	if err := rdb.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	pid := s.pid()

	s.Kill(t)
	if s.running() {
		t.Fatal("running after Kill")
	}
	if !processGone(pid) && runtime.GOOS == "linux" {
		t.Errorf("pid %d still exists after Kill", pid)
	}
	if err := rdb.Ping(ctx).Err(); err == nil {
		t.Fatal("PING succeeded after Kill")
	}
	s.Kill(t) // killing a stopped server is a no-op

	s.Restart(t)
	if got := s.pid(); got == pid || got == 0 {
		t.Errorf("pid after Restart = %d, want a new process (was %d)", got, pid)
	}
	// The old client reconnects to the same address and finds an empty
	// server: nothing was persisted.
	if err := rdb.Get(ctx, "k").Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET k after Restart: err = %v, want redis.Nil", err)
	}
	got, err := rdb.ConfigGet(ctx, "maxmemory").Result()
	if err != nil || got["maxmemory"] != "1048576" {
		t.Errorf("CONFIG GET maxmemory after Restart = %v, %v; want the extra argument kept", got, err)
	}
	s.Restart(t) // restarting a running server replaces its process
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after second Restart: %v", err)
	}
}

func TestCleanupKillsServer(t *testing.T) {
	t.Parallel()
	var s *Server
	var pid int
	t.Run("inner", func(t *testing.T) {
		s = StartServer(t)
		pid = s.pid()
	})
	if s.running() {
		t.Fatal("server still running after its test's cleanup")
	}
	if runtime.GOOS == "linux" && !processGone(pid) {
		t.Errorf("pid %d still exists after cleanup", pid)
	}
	if _, err := probe(s.Addr, time.Second); err == nil {
		t.Errorf("%s still answers after cleanup", s.Addr)
	}
}

func TestFreezeThawPause(t *testing.T) {
	t.Parallel()
	if runtime.GOOS != "linux" {
		t.Skip("Freeze needs SIGSTOP")
	}
	ctx := context.Background()
	s := StartServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr, ReadTimeout: 200 * time.Millisecond, MaxRetries: -1})
	defer rdb.Close()
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING: %v", err)
	}

	s.Freeze(t)
	start := time.Now()
	err := rdb.Ping(ctx).Err()
	var netErr interface{ Timeout() bool }
	if !errors.As(err, &netErr) || !netErr.Timeout() {
		t.Fatalf("PING to a frozen server: err = %v, want a timeout", err)
	}
	if d := time.Since(start); d < 150*time.Millisecond {
		t.Errorf("PING failed after %v, before the read timeout", d)
	}
	s.Thaw(t)
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after Thaw: %v", err)
	}

	s.Pause(t, time.Second)
	if err := rdb.Ping(ctx).Err(); err == nil {
		t.Fatal("PING answered within 200ms during a 1s CLIENT PAUSE")
	}
	slow := redis.NewClient(&redis.Options{Addr: s.Addr}) // 3 s read timeout
	defer slow.Close()
	if err := slow.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after the pause: %v", err)
	}
}

// A start that finds its port taken, by a listener or by a cluster bus
// listener on port+10000, retries on a new port.
func TestStartRetriesTakenPort(t *testing.T) {
	t.Parallel()
	for _, cluster := range []bool{false, true} {
		// The blocked port is the system's pick, held from the start: a
		// port picked free and listened on after could be taken in
		// between by a server another test starts.
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		blocked := l.Addr().(*net.TCPAddr).Port
		taken := blocked
		var args []string
		if cluster {
			if taken = blocked - busPortOffset; taken < 1024 { // ephemeral ports are above 32767 on Linux
				t.Fatalf("the system picked port %d: no data port below it for a bus port", blocked)
			}
			args = []string{"--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(t.TempDir(), "nodes.conf")}
		}
		calls := 0
		ports := func() (int, error) {
			calls++
			if calls == 1 {
				return taken, nil
			}
			return clusterPort()
		}
		s, err := startServer(t.TempDir(), nil, ports, args...)
		_ = l.Close()
		if err != nil {
			t.Fatalf("cluster=%v: start with port %d taken: %v", cluster, blocked, err)
		}
		s.stop()
		// (More than two picks when another test took the second.)
		if calls < 2 || s.Addr == net.JoinHostPort("127.0.0.1", strconv.Itoa(taken)) {
			t.Errorf("cluster=%v: %d port picks, Addr %s; want a second pick after port %d was taken", cluster, calls, s.Addr, blocked)
		}
	}
}

func TestShared(t *testing.T) {
	ctx := context.Background()
	a, b := Shared(t), Shared(t)
	if a != b {
		t.Fatalf("Shared returned two servers: %s and %s", a.Addr, b.Addr)
	}
	if err := a.Client(t).Ping(ctx).Err(); err != nil {
		t.Fatalf("PING: %v", err)
	}
	for name, f := range map[string]func(testing.TB){
		"Kill":    a.Kill,
		"Restart": a.Restart,
		"Freeze":  a.Freeze,
		"Pause":   func(tb testing.TB) { a.Pause(tb, time.Second) },
	} {
		r := runRecording(t, f)
		if !strings.Contains(r.fatal, "shared") {
			t.Errorf("%s of the shared server: fatal %q, want a refusal", name, r.fatal)
		}
	}
	if !a.running() {
		t.Fatal("shared server stopped")
	}
}

func TestMissingRedisServer(t *testing.T) {
	// t.Setenv: not parallel.
	t.Setenv("SLUICE_REDIS_SERVER", "/nonexistent/redis-server")
	for _, ci := range []string{"", "false", "true", "1"} {
		t.Run("CI="+ci, func(t *testing.T) {
			t.Setenv("CI", ci)
			wantFatal, _ := strconv.ParseBool(ci)
			for name, start := range map[string]func(testing.TB){
				"StartServer":  func(tb testing.TB) { StartServer(tb) },
				"StartCluster": func(tb testing.TB) { StartCluster(tb, 1, 0) },
			} {
				r := runRecording(t, start)
				if wantFatal {
					if r.skip != "" || !strings.Contains(r.fatal, "redis-server not installed") {
						t.Errorf("%s: skip %q, fatal %q; want a failure naming the missing redis-server", name, r.skip, r.fatal)
					}
				} else if r.fatal != "" || !strings.Contains(r.skip, "redis-server not installed") {
					t.Errorf("%s: skip %q, fatal %q; want a skip naming the missing redis-server", name, r.skip, r.fatal)
				}
			}
		})
	}
}

// recordingTB records Skip and Fatal instead of ending the real test; like
// the real ones they end the goroutine that calls them.
type recordingTB struct {
	testing.TB
	skip, fatal string
}

func (r *recordingTB) Helper() {}

func (r *recordingTB) Skipf(format string, args ...any) {
	r.skip = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func (r *recordingTB) Fatalf(format string, args ...any) {
	r.fatal = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// runRecording runs f with a recordingTB in its own goroutine, as the
// testing package runs a test.
func runRecording(t *testing.T, f func(testing.TB)) *recordingTB {
	r := &recordingTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(r)
	}()
	<-done
	return r
}
