package e2e

import (
	"context"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/sluicehq/sluice/internal/redistest"
)

// demoTimeout is the demos' deadline in TestDemoRedisKilled: a dead Redis
// refuses connections at once, and a roomy deadline keeps a slow moment of
// the machine from sending a request to the local fallback before the
// fault.
const demoTimeout = time.Second

// TestDemoRedisKilled kills the redis-server behind three demo processes
// (net/http, Gin, Echo; -failure local) under load and restarts it: every
// request is answered (200 or 429) within the deadline plus slack, and the
// three limit together again soon after the restart. A probe every 100 ms
// sends 30 requests for a fresh client, 10 to each demo, against a limit
// of 20: while Redis is down the local fallbacks serve 18 (each its share
// of the limit, 6, among three instances), Redis exactly 20; the test
// reports when the probes turn exact again.
func TestDemoRedisKilled(t *testing.T) {
	const limit = 20
	srv := redistest.StartServer(t)
	urls := startDemos(t,
		"-redis", "redis://"+srv.Addr+"/0",
		"-name", uniq("killed"),
		"-algorithm", "sliding_log",
		"-rate", strconv.Itoa(limit),
		"-period", longPeriod().String(),
		"-key", "header:"+clientHeader,
		"-failure", "local",
		"-timeout", demoTimeout.String(),
	)
	ctx := context.Background()
	hc := newHTTPClient(16)
	defer hc.CloseIdleConnections()
	probe := func() stats {
		client := uniq("probe")
		return summarize(load{client: hc, urls: urls, workers: 6, n: 30, key: func(int) string { return client }}.run(ctx))
	}
	if st := probe(); st.status[http.StatusOK] != limit {
		t.Fatalf("before the fault: %s; want exactly %d×200 across the three", st, limit)
	}

	stop := make(chan struct{})
	var rs []reply
	done := make(chan struct{})
	go func() {
		defer close(done)
		base := uniq("load")
		rs = load{client: hc, urls: urls, workers: 6, stop: stop, key: func(i int) string { return base + "-" + strconv.Itoa(i) }}.run(ctx)
	}()
	time.Sleep(300 * time.Millisecond) // traffic before the fault
	killAt := time.Now()
	srv.Kill(t)
	// The probe while Redis is down meets the outage as the load does:
	// every demo's breaker open (a refused connection opens it at once).
	waitDemos(t, hc, urls, "sluice_store_breaker_open", 10*time.Second, allOf(1))
	down := probe()
	time.Sleep(time.Until(killAt.Add(1500 * time.Millisecond))) // the outage: 1.5 s
	srv.Restart(t)
	restarted := time.Now()
	var back time.Duration
	probes := 0
	for {
		probes++
		if st := probe(); st.status[http.StatusOK] == limit {
			back = time.Since(restarted)
			break
		}
		if time.Since(restarted) > recoveryBound {
			break
		}
		time.Sleep(100 * time.Millisecond) // between probes
	}
	close(stop)
	<-done
	all := summarize(rs)
	t.Logf("three demos, Redis killed for %v: load %s", restarted.Sub(killAt).Round(time.Millisecond), all)
	t.Logf("probe while Redis was down (local fallback in each process): %s", down)
	if back == 0 {
		t.Fatalf("probes still not exact %v after the restart (%d probes)", recoveryBound, probes)
	}
	t.Logf("probes exact again %v after the restart (%d probes)", back.Round(time.Millisecond), probes)
	if all.errs != 0 {
		t.Errorf("%d requests got no HTTP answer (first: %v)", all.errs, all.first)
	}
	for code, n := range all.status {
		if code != http.StatusOK && code != http.StatusTooManyRequests {
			t.Errorf("status %d ×%d under FailLocal", code, n)
		}
	}
	if m := all.max(); m > demoTimeout+faultSlack {
		t.Errorf("slowest answer took %v, want at most %v", m, demoTimeout+faultSlack)
	}
	// The probe's key is new to the fleet: each of the three fallbacks
	// takes its share of the limit, ⌊20/3⌋ = 6 (ALGORITHMS.md, "While the
	// store is away"), so the fleet serves 18 of the 30, not 3 × 10.
	if share := 3 * (limit / 3); down.status[http.StatusOK] != share || down.errs != 0 {
		t.Errorf("probe while Redis was down: %s; want %d served (each fallback its share of the limit of %d) and the rest refused", down, share, limit)
	}
}

// TestDemoHostile drives real demo processes with hostile clients: one
// keyed by IP without trusted proxies, whose client rotates every
// forwarding header, and one keyed by the sub of a verified JWT (else the
// IP), whose client sends tokens claiming a victim (wrong secret, expired,
// alg none). The rotating client gets one allowance; the forger spends its
// own address's allowance, not the victim's, and no response body names
// an error.
func TestDemoHostile(t *testing.T) {
	const limit = 20
	redisURL := "redis://" + redistest.Shared(t).Addr + "/0"
	// -failure closed and a roomy deadline: a slow moment must not admit
	// a request through the local fallback.
	common := []string{"-redis", redisURL, "-algorithm", "sliding_log", "-rate", strconv.Itoa(limit), "-period", longPeriod().String(),
		"-failure", "closed", "-timeout", "2s"}

	ipDemo := startDemo(t, append([]string{"-name", uniq("ip"), "-key", "ip"}, common...)...)
	r := newRand(7, 8)
	st := send(t, clientFrom("127.0.0.8"), ipDemo.URL, 10*limit, func(i int, req *http.Request) {
		if i%2 == 0 {
			forge(req, randIPv4(r))
		} else {
			forge(req, randIPv6(r))
		}
	})
	wantServed(t, "demo -key ip, forged forwarding headers", st, limit)

	secret := "e2e-demo-secret-Vq8rZ3kW1nXc6TbL9yHj"
	jwtDemo := startDemo(t, append([]string{"-name", uniq("jwt"), "-key", "jwt", "-jwt-secret", secret}, common...)...)
	now := time.Now()
	sign := func(m jwt.SigningMethod, key any, exp time.Time) string {
		s, err := jwt.NewWithClaims(m, jwt.MapClaims{"sub": "victim", "exp": exp.Unix()}).SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	bad := []string{
		sign(jwt.SigningMethodHS256, []byte("another-secret-0123456789abcdefghij"), now.Add(time.Hour)),
		sign(jwt.SigningMethodHS256, []byte(secret), now.Add(-time.Hour)),
		sign(jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, now.Add(time.Hour)),
	}
	valid := sign(jwt.SigningMethodHS256, []byte(secret), now.Add(time.Hour))
	hc := clientFrom("127.0.0.9")
	rs := load{client: hc, urls: []string{jwtDemo.URL}, workers: 4, n: 10 * limit, keep: true,
		prepare: func(i int, req *http.Request) { req.Header.Set("Authorization", "Bearer "+bad[i%len(bad)]) }}.run(context.Background())
	hc.CloseIdleConnections()
	wantServed(t, "demo -key jwt, forged tokens claiming the victim", summarize(rs), limit)
	for _, rp := range rs {
		if rp.status == http.StatusTooManyRequests && leaks(rp.body) {
			t.Errorf("429 body %q names an error", rp.body)
		}
	}
	st = send(t, clientFrom("127.0.0.9"), jwtDemo.URL, 2*limit, func(_ int, req *http.Request) {
		req.Header.Set("Authorization", "Bearer "+valid)
	})
	wantServed(t, "demo -key jwt, the victim from the forger's address", st, limit)
}

// TestDemoRecoveryBurst: two demo processes share a fixed window of 50 per
// API key; Redis is killed under traffic (the stores' breakers open) and
// restarted, and a little later a burst of 200 requests from 32 workers
// for a new key must get exactly 50 through, under -failure local and
// closed (closed: no 503 once Redis answers), five times in a row. The
// breakers close in the background within a cooldown (1 s) of Redis
// answering, so no request of the burst is decided by a process alone.
// Background traffic on other keys runs throughout.
func TestDemoRecoveryBurst(t *testing.T) {
	const limit, burst, workers, rounds = 50, 200, 32, 5
	for _, policy := range []string{"local", "closed"} {
		t.Run(policy, func(t *testing.T) {
			srv := redistest.StartServer(t)
			urls := startDemosOf(t, []string{"nethttp", "gin"},
				"-redis", "redis://"+srv.Addr+"/0", "-name", uniq("burst"),
				"-algorithm", "fixed_window", "-rate", strconv.Itoa(limit), "-period", longPeriod().String(),
				"-key", "header:"+clientHeader, "-failure", policy, "-timeout", demoTimeout.String())
			ctx := context.Background()
			hc := newHTTPClient(workers + 4)
			defer hc.CloseIdleConnections()
			stop := make(chan struct{})
			done := make(chan []reply)
			go func() {
				base := uniq("background")
				done <- load{client: hc, urls: urls, workers: 2, stop: stop,
					key: func(i int) string { return base + "-" + strconv.Itoa(i%100) }}.run(ctx)
			}()
			for round := 1; round <= rounds; round++ {
				srv.Kill(t)
				time.Sleep(700 * time.Millisecond) // traffic while Redis is down
				srv.Restart(t)
				// Every breaker closed again (within a cooldown of Redis
				// answering) and every debt charged: no request of the
				// burst is decided by a process alone.
				waitDemos(t, hc, urls, "sluice_store_breaker_open", 10*time.Second, noneOf(1))
				waitDemos(t, hc, urls, "sluice_store_debts", 10*time.Second, allOf(0))
				key := uniq("tenant")
				st := summarize(load{client: hc, urls: urls, workers: workers, n: burst,
					key: func(int) string { return key }}.run(ctx))
				t.Logf("round %d: %s", round, st)
				if st.status[http.StatusOK] != limit || st.status[http.StatusTooManyRequests] != burst-limit {
					t.Errorf("round %d: %s; want exactly %d×200 and %d×429", round, st, limit, burst-limit)
				}
			}
			close(stop)
			bg := summarize(<-done)
			t.Logf("background traffic: %s", bg)
		})
	}
}
