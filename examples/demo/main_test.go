package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/internal/exampletest"
	"github.com/sluicehq/sluice/internal/redistest"
)

var client = &http.Client{Timeout: 10 * time.Second}

// quietLogger drops go-redis' log lines: the tests with a dead Redis would
// print one per failed dial.
type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

func init() { redis.SetLogger(quietLogger{}) }

// demo is one run of the demo inside the test process.
type demo struct {
	url    string // http://127.0.0.1:port
	stderr *exampletest.SyncBuffer
}

const listeningPrefix = "listening on http://"

// startDemo runs the demo with -addr 127.0.0.1:0 and args until the test
// ends, waits for its "listening on" line and returns its URL. At cleanup it
// cancels the run's context and checks that run returns nil (a graceful
// shutdown).
func startDemo(t *testing.T, args ...string) *demo {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	d := &demo{stderr: new(exampletest.SyncBuffer)}
	done := make(chan error, 1)
	go func() {
		err := run(ctx, append([]string{"-addr", "127.0.0.1:0"}, args...), pw, d.stderr)
		pw.Close()
		done <- err
	}()
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default:
			}
		}
		close(lines)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("demo %q: run returned %v after cancel, want nil (graceful shutdown)", args, err)
			}
		case <-time.After(15 * time.Second):
			t.Errorf("demo %q: still running 15s after cancel", args)
		}
	})
	select {
	case line, ok := <-lines:
		if !ok || !strings.HasPrefix(line, listeningPrefix) {
			t.Fatalf("demo %q: first stdout line %q, want %q...; stderr:\n%s", args, line, listeningPrefix, d.stderr)
		}
		d.url = "http://" + strings.TrimPrefix(line, listeningPrefix)
		if strings.HasSuffix(d.url, ":0") {
			t.Fatalf("demo %q: printed %q, want the real port", args, line)
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("demo %q: no %q line within 15s; stderr:\n%s", args, listeningPrefix, d.stderr)
	}
	return d
}

// waitLog waits until the demo's stderr holds s.
func (d *demo) waitLog(t *testing.T, s string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(d.stderr.String(), s) {
		if time.Now().After(deadline) {
			t.Fatalf("stderr has no %q after 10s:\n%s", s, d.stderr)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// reply is the part of a response the tests look at.
type reply struct {
	status int
	body   string
	header http.Header
}

func get(t *testing.T, url string, header ...string) reply {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: reading the body: %v", url, err)
	}
	return reply{status: resp.StatusCode, body: string(body), header: resp.Header}
}

// headerInt returns the integer value of header name, failing the test if
// it is missing or not an integer.
func headerInt(t *testing.T, r reply, name string) int64 {
	t.Helper()
	v := r.header.Get(name)
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		t.Fatalf("%s: %q is not an integer (status %d, headers %v)", name, v, r.status, r.header)
	}
	return n
}

// expectAllowed checks a 200 "ok" with the legacy headers of a limit of
// capacity limit and remaining left.
func expectAllowed(t *testing.T, r reply, limit, remaining int64) {
	t.Helper()
	if r.status != http.StatusOK || r.body != "ok" {
		t.Fatalf("got %d %q, want 200 \"ok\"", r.status, r.body)
	}
	if got := headerInt(t, r, "X-RateLimit-Limit"); got != limit {
		t.Errorf("X-RateLimit-Limit %d, want %d", got, limit)
	}
	if got := headerInt(t, r, "X-RateLimit-Remaining"); got != remaining {
		t.Errorf("X-RateLimit-Remaining %d, want %d", got, remaining)
	}
	if r.header.Get("Retry-After") != "" {
		t.Errorf("Retry-After %q on an allowed request", r.header.Get("Retry-After"))
	}
}

// expectDenied checks a 429 with the legacy headers and a Retry-After in
// [minRetry, maxRetry] seconds.
func expectDenied(t *testing.T, r reply, limit, minRetry, maxRetry int64) {
	t.Helper()
	if r.status != http.StatusTooManyRequests {
		t.Fatalf("got %d %q, want 429", r.status, r.body)
	}
	if got := headerInt(t, r, "X-RateLimit-Limit"); got != limit {
		t.Errorf("X-RateLimit-Limit %d, want %d", got, limit)
	}
	if got := headerInt(t, r, "X-RateLimit-Remaining"); got != 0 {
		t.Errorf("X-RateLimit-Remaining %d, want 0", got)
	}
	if got := headerInt(t, r, "Retry-After"); got < minRetry || got > maxRetry {
		t.Errorf("Retry-After %d, want %d to %d", got, minRetry, maxRetry)
	}
	now := time.Now().Unix()
	if reset := headerInt(t, r, "X-RateLimit-Reset"); reset < now || reset > now+7300 {
		t.Errorf("X-RateLimit-Reset %d, want a Unix time from now (%d) on", reset, now)
	}
}

// expectUnlimited checks that url answers 200 "ok" n times without
// rate-limit headers.
func expectUnlimited(t *testing.T, url string, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		r := get(t, url)
		if r.status != http.StatusOK || r.body != "ok" {
			t.Fatalf("%s request %d: got %d %q, want 200 \"ok\"", url, i+1, r.status, r.body)
		}
		for _, h := range []string{"X-RateLimit-Limit", "Retry-After", "RateLimit"} {
			if v := r.header.Get(h); v != "" {
				t.Fatalf("%s request %d: %s: %q, want no rate-limit headers", url, i+1, h, v)
			}
		}
	}
}

// metricValue returns the value of the one sample of metric in the
// Prometheus text exposition body whose labels include every label given.
func metricValue(t *testing.T, body, metric string, labels ...string) float64 {
	t.Helper()
	var found []string
	for _, line := range strings.Split(body, "\n") {
		if !strings.HasPrefix(line, metric+"{") {
			continue
		}
		ls, _, _ := strings.Cut(line[len(metric):], "}")
		match := true
		for _, l := range labels {
			match = match && strings.Contains(ls, l)
		}
		if match {
			found = append(found, line)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d samples of %s%q, want 1:\n%s", len(found), metric, labels, body)
	}
	f := strings.Fields(found[0])
	v, err := strconv.ParseFloat(f[len(f)-1], 64)
	if err != nil {
		t.Fatalf("sample %q: %v", found[0], err)
	}
	return v
}

var frameworks = []string{"nethttp", "gin", "echo"}

func TestFrameworks(t *testing.T) {
	t.Parallel()
	for _, fw := range frameworks {
		t.Run(fw, func(t *testing.T) {
			t.Parallel()
			d := startDemo(t, "-framework", fw, "-rate", "3", "-period", "1m")
			for i := int64(1); i <= 3; i++ {
				expectAllowed(t, get(t, d.url+"/"), 3, 3-i)
			}
			// GCRA 3/min: the next request may pass 20 s after the first
			// (less whatever time the requests took).
			expectDenied(t, get(t, d.url+"/"), 3, 15, 20)
			expectDenied(t, get(t, d.url+"/"), 3, 15, 20)
			expectUnlimited(t, d.url+"/healthz", 10)
			// /metrics is never limited and counts the decisions above.
			for i := 0; i < 3; i++ {
				r := get(t, d.url+"/metrics")
				if r.status != http.StatusOK || r.header.Get("X-RateLimit-Limit") != "" {
					t.Fatalf("GET /metrics: %d, X-RateLimit-Limit %q", r.status, r.header.Get("X-RateLimit-Limit"))
				}
				if got := metricValue(t, r.body, "sluice_decisions_total", `limiter="demo"`, `outcome="allowed"`); got != 3 {
					t.Errorf("allowed decisions %v, want 3", got)
				}
				if got := metricValue(t, r.body, "sluice_decisions_total", `limiter="demo"`, `outcome="denied"`); got != 2 {
					t.Errorf("denied decisions %v, want 2", got)
				}
			}
			if r := get(t, d.url+"/nowhere"); r.status != http.StatusNotFound {
				t.Errorf("GET /nowhere: %d, want 404", r.status)
			}
			if !strings.Contains(d.stderr.String(), fw+", GET / limited to "+store.Limit{Algorithm: store.GCRA, Rate: 3, Period: time.Minute}.String()+" per ip key, store memory") {
				t.Errorf("stderr does not describe the setup:\n%s", d.stderr)
			}
		})
	}
}

func TestAlgorithms(t *testing.T) {
	t.Parallel()
	// Windows of an hour, so that the three requests fall in one window.
	for _, alg := range []string{"gcra", "token_bucket", "fixed_window", "sliding_window", "sliding_log"} {
		t.Run(alg, func(t *testing.T) {
			t.Parallel()
			d := startDemo(t, "-algorithm", alg, "-rate", "2", "-period", "1h")
			expectAllowed(t, get(t, d.url+"/"), 2, 1)
			expectAllowed(t, get(t, d.url+"/"), 2, 0)
			// A sliding window may wait up to two periods.
			expectDenied(t, get(t, d.url+"/"), 2, 1, 7200)
		})
	}
	t.Run("leaky_bucket", func(t *testing.T) {
		t.Parallel()
		// One request leaves every 500 ms and one more may wait: of six
		// concurrent requests, one is served at once, one is held, the
		// rest are refused (more are served only if the six arrive more
		// than 500 ms apart).
		d := startDemo(t, "-algorithm", "leaky_bucket", "-rate", "2", "-period", "1s", "-burst", "1")
		var wg sync.WaitGroup
		replies := make(chan reply, 6)
		for i := 0; i < 6; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				replies <- get(t, d.url+"/")
			}()
		}
		wg.Wait()
		close(replies)
		var ok, denied int
		for r := range replies {
			switch r.status {
			case http.StatusOK:
				ok++
			case http.StatusTooManyRequests:
				denied++
				if r.header.Get("Retry-After") == "" {
					t.Error("429 without Retry-After")
				}
			default:
				t.Errorf("status %d %q", r.status, r.body)
			}
		}
		if ok < 2 || denied < 1 {
			t.Errorf("%d served, %d refused; want at least 2 served (one held) and 1 refused", ok, denied)
		}
	})
	t.Run("limit flag", func(t *testing.T) {
		t.Parallel()
		d := startDemo(t, "-limit", "2/m burst 3")
		for i := int64(1); i <= 3; i++ {
			expectAllowed(t, get(t, d.url+"/"), 3, 3-i)
		}
		expectDenied(t, get(t, d.url+"/"), 3, 25, 30) // one more in 30 s
	})
	t.Run("penalty", func(t *testing.T) {
		t.Parallel()
		d := startDemo(t, "-rate", "1", "-period", "1s", "-penalty", "1h")
		expectAllowed(t, get(t, d.url+"/"), 1, 0)
		expectDenied(t, get(t, d.url+"/"), 1, 3500, 3600)
	})
}

func TestHeaderStyles(t *testing.T) {
	t.Parallel()
	t.Run("ietf", func(t *testing.T) {
		t.Parallel()
		d := startDemo(t, "-headers", "ietf", "-rate", "3", "-period", "1m", "-name", "api")
		r := get(t, d.url+"/")
		if r.status != http.StatusOK {
			t.Fatalf("status %d", r.status)
		}
		// The Limiter's name (-name) stays internal: the policy is "default".
		if got, want := r.header.Get("RateLimit-Policy"), `"default";q=3;w=60`; got != want {
			t.Errorf("RateLimit-Policy %q, want %q", got, want)
		}
		if got, want := r.header.Get("RateLimit"), `"default";r=2;t=20`; got != want {
			t.Errorf("RateLimit %q, want %q", got, want)
		}
		if v := r.header.Get("X-RateLimit-Limit"); v != "" {
			t.Errorf("X-RateLimit-Limit %q under -headers ietf", v)
		}
	})
	t.Run("both", func(t *testing.T) {
		t.Parallel()
		d := startDemo(t, "-headers", "both", "-rate", "3", "-period", "1m")
		r := get(t, d.url+"/")
		expectAllowed(t, r, 3, 2)
		if got, want := r.header.Get("RateLimit-Policy"), `"default";q=3;w=60`; got != want {
			t.Errorf("RateLimit-Policy %q, want %q", got, want)
		}
	})
}

func TestKeys(t *testing.T) {
	t.Parallel()
	t.Run("header", func(t *testing.T) {
		t.Parallel()
		d := startDemo(t, "-key", "header:X-User", "-rate", "2", "-period", "1m")
		expectAllowed(t, get(t, d.url+"/", "X-User", "alice"), 2, 1)
		expectAllowed(t, get(t, d.url+"/", "X-User", "alice"), 2, 0)
		expectDenied(t, get(t, d.url+"/", "X-User", "alice"), 2, 1, 60)
		expectAllowed(t, get(t, d.url+"/", "X-User", "bob"), 2, 1)
		// Requests without the header share one bucket: still limited.
		expectAllowed(t, get(t, d.url+"/"), 2, 1)
		expectAllowed(t, get(t, d.url+"/"), 2, 0)
		expectDenied(t, get(t, d.url+"/"), 2, 1, 60)
	})
	t.Run("ip", func(t *testing.T) {
		t.Parallel()
		// Without trusted proxies a forwarding header is ignored: a client
		// rotating X-Forwarded-For stays one client.
		d := startDemo(t, "-rate", "2", "-period", "1m")
		expectAllowed(t, get(t, d.url+"/", "X-Forwarded-For", "203.0.113.1"), 2, 1)
		expectAllowed(t, get(t, d.url+"/", "X-Forwarded-For", "203.0.113.2"), 2, 0)
		expectDenied(t, get(t, d.url+"/", "X-Forwarded-For", "203.0.113.3"), 2, 1, 60)
	})
	t.Run("trusted-proxies", func(t *testing.T) {
		t.Parallel()
		// The test's loopback address is a trusted proxy: each forwarded
		// client gets its own allowance.
		d := startDemo(t, "-rate", "1", "-period", "1m", "-trusted-proxies", "127.0.0.0/8, ::1")
		expectAllowed(t, get(t, d.url+"/", "X-Forwarded-For", "203.0.113.1"), 1, 0)
		expectDenied(t, get(t, d.url+"/", "X-Forwarded-For", "203.0.113.1"), 1, 1, 60)
		expectAllowed(t, get(t, d.url+"/", "X-Forwarded-For", "203.0.113.2"), 1, 0)
		// The client's own entries left of the one the proxy appended do
		// not count.
		expectDenied(t, get(t, d.url+"/", "X-Forwarded-For", "198.51.100.9, 203.0.113.2"), 1, 1, 60)
	})
	t.Run("jwt", func(t *testing.T) {
		t.Parallel()
		secret := "7f3a9c21e08b4d56a1c7e92f30b85d4c"
		token := func(sub, key string) string {
			s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
				"sub": sub, "exp": time.Now().Add(time.Hour).Unix(),
			}).SignedString([]byte(key))
			if err != nil {
				t.Fatal(err)
			}
			return "Bearer " + s
		}
		d := startDemo(t, "-key", "jwt", "-jwt-secret", secret, "-rate", "2", "-period", "1m")
		alice, bob := token("alice", secret), token("bob", secret)
		forged := token("bob", "not-the-secret-not-the-secret-!!")
		expectAllowed(t, get(t, d.url+"/", "Authorization", alice), 2, 1)
		expectAllowed(t, get(t, d.url+"/", "Authorization", alice), 2, 0)
		expectDenied(t, get(t, d.url+"/", "Authorization", alice), 2, 1, 60)
		// A forged token claiming bob is limited by its address, and
		// spends nothing of bob's.
		expectAllowed(t, get(t, d.url+"/", "Authorization", forged), 2, 1)
		expectAllowed(t, get(t, d.url+"/", "Authorization", forged), 2, 0)
		expectDenied(t, get(t, d.url+"/", "Authorization", forged), 2, 1, 60)
		expectDenied(t, get(t, d.url+"/"), 2, 1, 60) // no token: the same address
		expectAllowed(t, get(t, d.url+"/", "Authorization", bob), 2, 1)
	})
	for _, fw := range frameworks {
		t.Run("route/"+fw, func(t *testing.T) {
			t.Parallel()
			d := startDemo(t, "-framework", fw, "-key", "route", "-rate", "1", "-period", "1m")
			expectAllowed(t, get(t, d.url+"/"), 1, 0)
			expectDenied(t, get(t, d.url+"/"), 1, 1, 60)
			if !strings.Contains(d.stderr.String(), "per route key") {
				t.Errorf("stderr does not name the route key:\n%s", d.stderr)
			}
		})
	}
}

// deadRedisAddr returns a loopback address nothing listens on.
func deadRedisAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func TestRedisUnreachable(t *testing.T) {
	t.Parallel()
	dead := deadRedisAddr(t)
	for _, fw := range frameworks {
		t.Run("local/"+fw, func(t *testing.T) {
			t.Parallel()
			// The local memory store enforces the same limit.
			d := startDemo(t, "-framework", fw, "-redis", "redis://"+dead+"/0", "-failure", "local", "-rate", "2", "-period", "1m")
			expectAllowed(t, get(t, d.url+"/"), 2, 1)
			expectAllowed(t, get(t, d.url+"/"), 2, 0)
			expectDenied(t, get(t, d.url+"/"), 2, 1, 60)
			expectUnlimited(t, d.url+"/healthz", 2)
		})
		t.Run("open/"+fw, func(t *testing.T) {
			t.Parallel()
			d := startDemo(t, "-framework", fw, "-redis", "redis://"+dead+"/0", "-failure", "open", "-rate", "2", "-period", "1m")
			expectUnlimited(t, d.url+"/", 5)
			expectUnlimited(t, d.url+"/healthz", 2)
		})
		t.Run("closed/"+fw, func(t *testing.T) {
			t.Parallel()
			d := startDemo(t, "-framework", fw, "-cluster", dead, "-failure", "closed", "-rate", "2", "-period", "1m")
			for i := 0; i < 3; i++ {
				if r := get(t, d.url+"/"); r.status != http.StatusServiceUnavailable || strings.Contains(r.body, "dial") {
					t.Fatalf("GET / with Redis down under -failure closed: %d %q, want 503 without error details", r.status, r.body)
				}
			}
			m := get(t, d.url+"/metrics")
			if got := metricValue(t, m.body, "sluice_decisions_total", `outcome="failed_closed"`); got != 3 {
				t.Errorf("failed_closed decisions %v, want 3", got)
			}
			expectUnlimited(t, d.url+"/healthz", 2)
		})
	}
	// The startup check says Redis is not answering, without holding up
	// the start.
	d := startDemo(t, "-redis", "redis://"+dead+"/0")
	d.waitLog(t, "demo: redis "+dead+" is not answering")
}

// TestSharedRedis runs two demos, on different frameworks, against one
// real redis-server: they enforce one limit together.
func TestSharedRedis(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	for i, alg := range []string{"gcra", "sliding_log", "fixed_window"} {
		t.Run(alg, func(t *testing.T) {
			t.Parallel()
			args := []string{"-redis", "redis://" + srv.Addr + "/0", "-algorithm", alg, "-rate", "5", "-period", "1h",
				"-name", "shared-" + alg, "-failure", "closed", "-timeout", "2s"} // no fallback on a busy machine
			a := startDemo(t, append(args, "-framework", frameworks[i%3])...)
			b := startDemo(t, append(args, "-framework", frameworks[(i+1)%3])...)
			a.waitLog(t, "demo: redis "+srv.Addr+" answers")
			b.waitLog(t, "demo: redis "+srv.Addr+" answers")
			var allowed, denied int
			for n := 0; n < 12; n++ {
				url := a.url
				if n%2 == 1 {
					url = b.url
				}
				r := get(t, url+"/")
				switch r.status {
				case http.StatusOK:
					allowed++
					if got := headerInt(t, r, "X-RateLimit-Remaining"); got != int64(5-allowed) {
						t.Errorf("request %d: X-RateLimit-Remaining %d, want %d (counted across both demos)", n+1, got, 5-allowed)
					}
				case http.StatusTooManyRequests:
					denied++
					expectDenied(t, r, 5, 1, 3600)
				default:
					t.Fatalf("request %d: %d %q (stderr:\n%s%s)", n+1, r.status, r.body, a.stderr, b.stderr)
				}
			}
			if allowed != 5 || denied != 7 {
				t.Errorf("%d allowed, %d denied across two demos; want 5 and 7", allowed, denied)
			}
		})
	}
}

// TestSharedCluster does the same on a Redis Cluster with -cluster.
func TestSharedCluster(t *testing.T) {
	t.Parallel()
	c := redistest.SharedCluster(t)
	args := []string{"-cluster", strings.Join(c.Addrs, ","), "-rate", "3", "-period", "1h",
		"-name", fmt.Sprintf("cluster-%d", time.Now().UnixNano()), "-failure", "closed", "-timeout", "2s"}
	a := startDemo(t, args...)
	b := startDemo(t, append(args, "-framework", "echo")...)
	// The first decisions on a cold cluster client (slot map, script
	// loads) may pass the per-decision timeout on a busy machine: -timeout
	// gives them room, and the startup check has loaded the slot map.
	a.waitLog(t, " answers")
	b.waitLog(t, " answers")
	allowed := 0
	for n := 0; n < 6; n++ {
		url := a.url
		if n%2 == 1 {
			url = b.url
		}
		switch r := get(t, url+"/"); r.status {
		case http.StatusOK:
			allowed++
		case http.StatusTooManyRequests:
		default:
			t.Fatalf("request %d: %d %q; stderr:\n%s%s", n+1, r.status, r.body, a.stderr, b.stderr)
		}
	}
	if allowed != 3 {
		t.Errorf("%d allowed across two demos on one cluster, want 3", allowed)
	}
}

func TestBadFlags(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string // in the message
	}{
		{[]string{"-framework", "fiber"}, `-framework "fiber": want nethttp, gin or echo`},
		{[]string{"-algorithm", "bucket"}, `-algorithm "bucket": want one of gcra, token_bucket, fixed_window, sliding_window, sliding_log, leaky_bucket`},
		{[]string{"-rate", "0"}, "-rate 0: must be positive"},
		{[]string{"-rate", "ten"}, `invalid value "ten" for flag -rate`},
		{[]string{"-period", "0s"}, "-period 0s: must be positive"},
		{[]string{"-period", "1"}, `invalid value "1" for flag -period`},
		{[]string{"-period", "1500ns"}, "whole number of microseconds"},
		{[]string{"-burst", "-1"}, "-burst -1: must not be negative"},
		{[]string{"-algorithm", "fixed_window", "-burst", "5"}, "fixed_window takes no burst"},
		{[]string{"-penalty", "-1s"}, "-penalty -1s: must not be negative"},
		{[]string{"-key", "cookie"}, `-key "cookie": want ip, header:NAME, jwt or route`},
		{[]string{"-key", "ip:x"}, `-key "ip:x"`},
		{[]string{"-key", "header:"}, "-key header:NAME needs a header name"},
		{[]string{"-key", "header:X Bad"}, `invalid header name "X Bad"`},
		{[]string{"-key", "jwt"}, "-key jwt needs -jwt-secret"},
		{[]string{"-key", "jwt", "-jwt-secret", "short"}, "want at least 32"},
		{[]string{"-jwt-secret", "7f3a9c21e08b4d56a1c7e92f30b85d4c"}, "-jwt-secret is only used with -key jwt"},
		{[]string{"-trusted-proxies", "10.0.0.0/33"}, "-trusted-proxies"},
		{[]string{"-trusted-proxies", ","}, "-trusted-proxies is empty"},
		{[]string{"-key", "route", "-trusted-proxies", "10.0.0.0/8"}, "only used with -key ip or jwt"},
		{[]string{"-failure", "retry"}, `-failure "retry": want local, open or closed`},
		{[]string{"-headers", "draft"}, `-headers "draft": want legacy, ietf or both`},
		{[]string{"-redis", "http://localhost:6379"}, "invalid URL scheme"},
		{[]string{"-redis", "redis://a:1", "-cluster", "b:2"}, "-redis and -cluster are alternatives"},
		{[]string{"-cluster", "localhost"}, `-cluster: node "localhost": want host:port`},
		{[]string{"-cluster", "a:1,:2"}, `node ":2": want host:port: missing host`},
		{[]string{"-cluster", "a:99999"}, `bad port "99999"`},
		{[]string{"-addr", "localhost"}, `-addr "localhost": want HOST:PORT`},
		{[]string{"-name", ""}, "-name must not be empty"},
		{[]string{"-name", "a\tb"}, "printable ASCII"},
		{[]string{"-limit", "10/x"}, `-limit: sluice: limit "10/x": unknown period unit "x"`},
		{[]string{"-limit", "10/s sliding_log burst 5"}, "-limit: sluice: limit"},
		{[]string{"-limit", "10/s", "-rate", "5"}, "-limit and -rate are alternatives"},
		{[]string{"-limit", "10/s", "-algorithm", "gcra"}, "-limit and -algorithm are alternatives"},
		{[]string{"-penalty", "1s", "-limit", "10/s"}, "-limit and -penalty are alternatives"},
		{[]string{"-timeout", "-1s"}, "-timeout -1s: want 0 (no deadline) or at least 1ms"},
		{[]string{"-timeout", "1ns"}, "-timeout 1ns: want 0 (no deadline) or at least 1ms; a shorter one never reaches Redis"},
		{[]string{"-trusted-proxies", "0.0.0.0/0"}, "-trusted-proxies"},
		{[]string{"-trusted-proxies", "::/0"}, "-trusted-proxies"},
		{[]string{"-bogus"}, "flag provided but not defined: -bogus"},
		{[]string{"-rate", "5", "extra"}, `unexpected argument "extra"`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			err := run(context.Background(), tc.args, &stdout, &stderr)
			var ue *usageError
			if !errors.As(err, &ue) {
				t.Fatalf("run(%q) = %v, want a usage error", tc.args, err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("run(%q) = %q, want it to contain %q", tc.args, err, tc.want)
			}
			if stdout.Len() > 0 {
				t.Errorf("run(%q) wrote %q on stdout", tc.args, stdout.String())
			}
			var msg bytes.Buffer
			if code := exitCode(err, &msg); code != 2 {
				t.Errorf("exit status %d, want 2", code)
			}
			if !strings.HasPrefix(msg.String(), "demo: "+err.Error()+"\n") {
				t.Errorf("message %q does not start with the error", msg.String())
			}
		})
	}
}

func TestHelp(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	if err := run(context.Background(), []string{"-h"}, &stdout, &stderr); err != nil {
		t.Fatalf("-h: %v", err)
	}
	for _, flag := range []string{"-addr", "-framework", "-redis", "-cluster", "-algorithm", "-rate", "-period",
		"-burst", "-penalty", "-limit", "-timeout", "-key", "-jwt-secret", "-trusted-proxies", "-failure", "-headers", "-name"} {
		if !strings.Contains(stdout.String(), "\n  "+flag+" ") {
			t.Errorf("-h does not describe %s:\n%s", flag, stdout.String())
		}
	}
}

func TestExitCode(t *testing.T) {
	t.Parallel()
	var w bytes.Buffer
	if code := exitCode(nil, &w); code != 0 || w.Len() != 0 {
		t.Errorf("exitCode(nil) = %d, %q", code, w.String())
	}
	if code := exitCode(fmt.Errorf("listen: %w", syscall.EADDRINUSE), &w); code != 1 || !strings.Contains(w.String(), "address already in use") {
		t.Errorf("exitCode(listen error) = %d, %q", code, w.String())
	}
}

// TestRedisRefusesSettings: a Redis database that does not exist would
// leave every decision to -failure for as long as the demo runs; the demo
// refuses to start (status 1) and says why.
func TestRedisRefusesSettings(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"-addr", "127.0.0.1:0", "-redis", "redis://" + srv.Addr + "/99"}, &stdout, &stderr)
	var ue *usageError
	if err == nil || errors.As(err, &ue) || !strings.Contains(err.Error(), "DB index is out of range") {
		t.Fatalf("run with database 99 = %v, want the server's refusal", err)
	}
	var msg bytes.Buffer
	if code := exitCode(err, &msg); code != 1 {
		t.Errorf("exit status %d, want 1", code)
	}
	if stdout.Len() > 0 {
		t.Errorf("stdout %q, want nothing: the demo must not listen", stdout.String())
	}
	t.Logf("%s", msg.String())
}

// TestPortTaken checks that a taken port is a runtime failure (status 1),
// not a flag error.
func TestPortTaken(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var stdout, stderr bytes.Buffer
	err = run(context.Background(), []string{"-addr", ln.Addr().String()}, &stdout, &stderr)
	var ue *usageError
	if err == nil || errors.As(err, &ue) || !strings.Contains(err.Error(), "listen") {
		t.Fatalf("run on a taken port = %v, want a listen error", err)
	}
	if stdout.Len() > 0 {
		t.Errorf("stdout %q, want nothing", stdout.String())
	}
}

// TestBinary builds the demo and runs it as a process, the way the README
// and the load tests do.
func TestBinary(t *testing.T) {
	t.Parallel()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is not on the PATH: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "demo")
	args := []string{"build", "-o", bin}
	if raceEnabled {
		args = append(args, "-race") // reuses the packages this test binary was built from
	}
	build := exec.Command(goBin, append(args, ".")...)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}

	t.Run("serve", func(t *testing.T) {
		cmd := exec.Command(bin, "-addr", "127.0.0.1:0", "-framework", "gin", "-rate", "1", "-period", "1m")
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var stderr exampletest.SyncBuffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = cmd.Process.Kill() }() // if the test fails early
		lines := make(chan string, 1)
		go func() {
			sc := bufio.NewScanner(stdout)
			if sc.Scan() {
				lines <- sc.Text()
			}
			close(lines)
			_, _ = io.Copy(io.Discard, stdout)
		}()
		var url string
		select {
		case line := <-lines:
			if !strings.HasPrefix(line, listeningPrefix) || strings.HasSuffix(line, ":0") {
				t.Fatalf("first line %q, want %q with the real port; stderr:\n%s", line, listeningPrefix+"127.0.0.1:PORT", &stderr)
			}
			url = "http://" + strings.TrimPrefix(line, listeningPrefix)
		case <-time.After(20 * time.Second):
			t.Fatalf("no listening line within 20s; stderr:\n%s", &stderr)
		}
		expectAllowed(t, get(t, url+"/"), 1, 0)
		expectDenied(t, get(t, url+"/"), 1, 1, 60)
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		waited := make(chan error, 1)
		go func() { waited <- cmd.Wait() }()
		select {
		case err := <-waited:
			if err != nil {
				t.Fatalf("after SIGTERM: %v, want exit status 0; stderr:\n%s", err, &stderr)
			}
		case <-time.After(15 * time.Second):
			t.Fatal("still running 15s after SIGTERM")
		}
	})
	t.Run("bad flag", func(t *testing.T) {
		cmd := exec.Command(bin, "-framework", "fiber")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 2 {
			t.Fatalf("bad flag: %v, want exit status 2", err)
		}
		if want := "demo: -framework \"fiber\": want nethttp, gin or echo\n"; !strings.HasPrefix(stderr.String(), want) {
			t.Errorf("stderr %q, want it to start with %q", stderr.String(), want)
		}
		if stdout.Len() > 0 {
			t.Errorf("stdout %q, want nothing", stdout.String())
		}
	})
	t.Run("help", func(t *testing.T) {
		out, err := exec.Command(bin, "-h").Output()
		if err != nil || !strings.HasPrefix(string(out), "Usage:") {
			t.Fatalf("-h: %v, %q", err, out)
		}
	})
}
