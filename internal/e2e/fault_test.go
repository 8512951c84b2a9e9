package e2e

import (
	"context"
	"maps"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/internal/redistest"
)

const (
	// faultTimeout is the Limiter's per-decision deadline in the fault tests.
	faultTimeout = defaultTimeout
	// faultSlack is what a request may take beyond faultTimeout under the
	// race detector on a loaded two-core machine. It is far below what a
	// stall on go-redis's defaults costs (a 3 s read timeout, retried), which
	// is what these bounds catch.
	faultSlack = 1500 * time.Millisecond
	// faultLimit is the allowance per key in the fault tests.
	faultLimit = 50
	// recoveryBound is how soon after Redis is back its decisions must be
	// too ("limiting is back within seconds").
	recoveryBound = 10 * time.Second
)

// faultLimits is one GCRA limit of faultLimit per longPeriod.
func faultLimits() []store.Limit {
	return []store.Limit{{Algorithm: store.GCRA, Rate: faultLimit, Period: longPeriod(), Burst: faultLimit}}
}

// exactBurst sends n requests for a fresh key with 8 workers and checks that
// exactly faultLimit are served and that the store decided every one.
func exactBurst(t *testing.T, ctx context.Context, svc *service, hc *http.Client, what string, n int) {
	t.Helper()
	exactBurstKey(t, ctx, svc, hc, what, n, uniq(what), 0)
}

// exactBurstKey is exactBurst for a given key of which used requests were
// already admitted.
func exactBurstKey(t *testing.T, ctx context.Context, svc *service, hc *http.Client, what string, n int, key string, used int) {
	t.Helper()
	want := faultLimit - used
	before := svc.tally.snapshot()
	rs := load{client: hc, urls: []string{svc.URL}, workers: 8, n: n, key: func(int) string { return key }}.run(ctx)
	st := summarize(rs)
	d := svc.tally.snapshot().sub(before)
	t.Logf("%s: %s; decisions %s", what, st, d)
	if st.errs != 0 || st.status[http.StatusOK] != want || st.status[http.StatusTooManyRequests] != n-want {
		t.Errorf("%s: %s; want %d×200 and %d×429 and no transport error", what, st, want, n-want)
	}
	if d.storeErrs != 0 {
		t.Errorf("%s: %d decisions without the store (%s), want 0", what, d.storeErrs, d)
	}
}

// TestFaultRedisKilled kills the Redis of a Limiter under load, restarts it,
// and checks, under each failure policy, that every request is answered
// within the deadline plus slack (no hang, no 500, no panic, no transport
// error), that the outage is handled by the policy, that decisions come
// from Redis again within seconds of the restart and are exact again, and
// that no goroutine is left behind.
func TestFaultRedisKilled(t *testing.T) {
	for _, policy := range []core.FailurePolicy{core.FailLocal, core.FailOpen, core.FailClosed} {
		t.Run(policyName[policy], func(t *testing.T) {
			srv := redistest.StartServer(t)
			base := goroutines()
			func() {
				ctx := context.Background()
				rdb := newRedisClient(srv.Addr)
				defer rdb.Close()
				st := newStore(t, rdb, faultTimeout)
				svc := newService(t, st, faultLimits(), core.WithFailurePolicy(policy))
				defer svc.Close()
				hc := newHTTPClient(8)
				defer hc.CloseIdleConnections()
				// exact checks the count on the same Redis, refusing (not
				// admitting locally) should a loaded machine miss a deadline.
				exact := newService(t, exactStore(t, rdb), faultLimits())
				defer exact.Close()

				exactBurst(t, ctx, exact, hc, "before", 2*faultLimit+20)

				// Continuous load, a fresh key per request so that every
				// decision needs the store; Redis dies and comes back under it.
				stop := make(chan struct{})
				var rs []reply
				done := make(chan struct{})
				go func() {
					defer close(done)
					base := uniq("outage")
					rs = load{client: hc, urls: []string{svc.URL}, workers: 6, stop: stop,
						key: func(i int) string { return base + "-" + strconv.Itoa(i) }}.run(ctx)
				}()
				time.Sleep(300 * time.Millisecond) // traffic before the fault
				before := svc.tally.snapshot()
				killAt := time.Now()
				srv.Kill(t)
				// The burst meets the outage as the load does: the breaker
				// open (a refused connection opens it at once).
				if !redistest.WaitUntil(10*time.Second, func() bool { return breakerOpen(st) }) {
					t.Fatalf("no breaker open 10 s after Redis was killed: %v", st.Stats().Breakers)
				}
				// One client, meanwhile, sends more than its allowance.
				burstKey := uniq("burst")
				burst := summarize(load{client: hc, urls: []string{svc.URL}, workers: 2, n: 2*faultLimit + 20,
					key: func(int) string { return burstKey }}.run(ctx))
				t.Logf("one key while Redis is down: %s", burst)
				wantBurst := map[core.FailurePolicy]map[int]int{
					core.FailLocal:  {http.StatusOK: faultLimit, http.StatusTooManyRequests: faultLimit + 20},
					core.FailOpen:   {http.StatusOK: 2*faultLimit + 20},
					core.FailClosed: {http.StatusServiceUnavailable: 2*faultLimit + 20},
				}[policy]
				if !maps.Equal(burst.status, wantBurst) || burst.errs != 0 {
					t.Errorf("one key while Redis is down: %s; want %v", burst, wantBurst)
				}
				time.Sleep(time.Until(killAt.Add(1500 * time.Millisecond))) // the outage: 1.5 s
				restartAt := time.Now()
				srv.Restart(t)
				restarted := svc.tally.watch()
				back, ok := svc.tally.waitRecovered(recoveryBound + 5*time.Second)
				time.Sleep(300 * time.Millisecond) // traffic after the recovery, judged with the outage's
				close(stop)
				<-done
				outage := svc.tally.snapshot().sub(before)

				all := summarize(rs)
				during := summarize(between(rs, killAt, restarted))
				t.Logf("policy %s: whole run %s", policyName[policy], all)
				t.Logf("while Redis was down (%v): %s", restarted.Sub(killAt).Round(time.Millisecond), during)
				t.Logf("decisions from the kill on: %s", outage)
				if !ok {
					t.Fatalf("no decision from Redis within %v of its restart (restart took %v); last error %v",
						recoveryBound+5*time.Second, restarted.Sub(restartAt).Round(time.Millisecond), outage.lastErr)
				}
				t.Logf("limiting back from Redis %v after the restart returned (restart took %v); last store error %v after that",
					back.Sub(restarted).Round(time.Millisecond), restarted.Sub(restartAt).Round(time.Millisecond),
					time.Unix(0, svc.tally.lastFail.Load()).Sub(back).Round(time.Millisecond))
				if back.Sub(restarted) > recoveryBound {
					t.Errorf("decisions came back from Redis %v after its restart, want within %v", back.Sub(restarted), recoveryBound)
				}
				if all.errs != 0 {
					t.Errorf("%d requests got no HTTP answer (first: %v)", all.errs, all.first)
				}
				if m := all.max(); m > faultTimeout+faultSlack {
					t.Errorf("slowest answer took %v, want at most %v", m, faultTimeout+faultSlack)
				}
				if during.sent < 20 {
					t.Fatalf("only %d requests while Redis was down; the outage was not exercised", during.sent)
				}
				failed := outage.storeErrs
				if failed == 0 {
					t.Fatalf("no decision saw a store failure")
				}
				// Every decision that saw a failure follows the policy.
				var want core.Outcome
				switch policy {
				case core.FailLocal:
					want = core.OutcomeFallback
				case core.FailOpen:
					want = core.OutcomeFailedOpen
				case core.FailClosed:
					want = core.OutcomeFailedClosed
				}
				if got := outage.byOutcome[want]; got != failed {
					t.Errorf("%d decisions saw a store failure but %d had outcome %s", failed, got, want)
				}
				if policy == core.FailClosed && outage.served[want] != 0 {
					t.Errorf("FailClosed served %d requests without a decision", outage.served[want])
				}
				if policy != core.FailClosed && during.status[http.StatusServiceUnavailable] != 0 {
					t.Errorf("%s answered 503 %d times", policyName[policy], during.status[http.StatusServiceUnavailable])
				}
				for code := range all.status {
					if code != http.StatusOK && code != http.StatusTooManyRequests && code != http.StatusServiceUnavailable {
						t.Errorf("unexpected status %d ×%d", code, all.status[code])
					}
				}

				exactBurst(t, ctx, exact, hc, "after", 2*faultLimit+20)
			}()
			checkGoroutines(t, base, 3)
		})
	}
}

// TestFaultRedisPaused holds every Redis command (CLIENT PAUSE) for longer
// than the deadline, under load: requests are answered within the deadline
// plus slack by the failure policy, and Redis decides again once the pause
// ends.
func TestFaultRedisPaused(t *testing.T) {
	const pause = 2 * time.Second
	for _, policy := range []core.FailurePolicy{core.FailLocal, core.FailClosed} {
		t.Run(policyName[policy], func(t *testing.T) {
			srv := redistest.StartServer(t)
			base := goroutines()
			func() {
				ctx := context.Background()
				rdb := newRedisClient(srv.Addr)
				defer rdb.Close()
				st := newStore(t, rdb, faultTimeout)
				svc := newService(t, st, faultLimits(), core.WithFailurePolicy(policy))
				defer svc.Close()
				hc := newHTTPClient(8)
				defer hc.CloseIdleConnections()
				// exact checks the count on the same Redis, refusing (not
				// admitting locally) should a loaded machine miss a deadline.
				exact := newService(t, exactStore(t, rdb), faultLimits())
				defer exact.Close()

				key := uniq("pause")
				stop := make(chan struct{})
				var rs []reply
				done := make(chan struct{})
				go func() {
					defer close(done)
					rs = load{client: hc, urls: []string{svc.URL}, workers: 8, stop: stop,
						key: func(i int) string { return key + "-" + strconv.Itoa(i) }}.run(ctx)
				}()
				time.Sleep(300 * time.Millisecond) // traffic before the fault
				before := svc.tally.snapshot()
				pauseAt := time.Now()
				srv.Pause(t, pause)
				end := pauseAt.Add(pause)
				time.Sleep(time.Until(end)) // the pause
				svc.tally.watch()
				back, ok := svc.tally.waitRecovered(recoveryBound + 5*time.Second)
				time.Sleep(300 * time.Millisecond) // traffic after the recovery, judged with the outage's
				close(stop)
				<-done
				d := svc.tally.snapshot().sub(before)

				all := summarize(rs)
				during := summarize(between(rs, pauseAt, end))
				t.Logf("policy %s: whole run %s", policyName[policy], all)
				t.Logf("during the %v pause: %s", pause, during)
				t.Logf("decisions from the pause on: %s", d)
				if !ok {
					t.Fatalf("no decision from Redis within %v of the pause's end", recoveryBound+5*time.Second)
				}
				t.Logf("limiting back from Redis %v after the pause ended; last store error %v after that (%v)",
					back.Sub(end).Round(time.Millisecond), time.Unix(0, svc.tally.lastFail.Load()).Sub(back).Round(time.Millisecond), d.lastErr)
				if all.errs != 0 {
					t.Errorf("%d requests got no HTTP answer (first: %v)", all.errs, all.first)
				}
				if m := all.max(); m > faultTimeout+faultSlack {
					t.Errorf("slowest answer took %v, want at most %v (a pause of %v must not hold requests)", m, faultTimeout+faultSlack, pause)
				}
				if d.errs["deadline"] == 0 {
					t.Errorf("no decision hit the deadline during the pause: %s", d)
				}
				if d.errs["breaker-open"] == 0 {
					t.Errorf("the circuit breaker never opened during the pause: %s", d)
				}
				if policy == core.FailClosed && during.status[http.StatusServiceUnavailable] == 0 {
					t.Errorf("FailClosed answered no 503 during the pause: %s", during)
				}
				exactBurst(t, ctx, exact, hc, "after", 2*faultLimit+20)
			}()
			checkGoroutines(t, base, 3)
		})
	}
}

// TestFaultScriptFlush empties Redis' script cache over and over while a
// key is driven past its limit: no error reaches the Limiter (go-redis
// falls back from EVALSHA to EVAL on NOSCRIPT) and the count stays exact.
func TestFaultScriptFlush(t *testing.T) {
	srv := redistest.StartServer(t)
	ctx := context.Background()
	rdb := newRedisClient(srv.Addr)
	defer rdb.Close()
	admin := srv.Client(t)
	sto := exactStore(t, rdb)
	const limit, n = 300, 900
	lims := []store.Limit{{Algorithm: store.SlidingLog, Rate: limit, Period: longPeriod()}}
	svc := newService(t, sto, lims)
	defer svc.Close()
	hc := newHTTPClient(8)
	defer hc.CloseIdleConnections()
	if err := admin.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}

	stop := make(chan struct{})
	var flushes atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(3 * time.Millisecond):
			}
			if err := admin.ScriptFlush(ctx).Err(); err != nil {
				t.Errorf("SCRIPT FLUSH: %v", err)
				return
			}
			flushes.Add(1)
		}
	}()
	key := uniq("flush")
	rs := load{client: hc, urls: []string{svc.URL}, workers: 8, n: n, key: func(int) string { return key }}.run(ctx)
	close(stop)
	wg.Wait()
	st := summarize(rs)
	d := svc.tally.snapshot()
	info, err := admin.Info(ctx, "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	evals, evalshas := commandCalls(info, "eval"), commandCalls(info, "evalsha")
	t.Logf("%d SCRIPT FLUSH during %s; decisions %s; Redis ran EVALSHA %d times, EVAL %d times (each EVAL is a NOSCRIPT recovered)",
		flushes.Load(), st, d, evalshas, evals)
	if st.errs != 0 || st.status[http.StatusOK] != limit || st.status[http.StatusTooManyRequests] != n-limit {
		t.Errorf("%s; want %d×200, %d×429", st, limit, n-limit)
	}
	if d.storeErrs != 0 {
		t.Errorf("%d store errors reached the Limiter (last: %v)", d.storeErrs, d.lastErr)
	}
	if flushes.Load() == 0 || evals == 0 {
		t.Errorf("the script cache was never lost while requests ran (%d flushes, %d EVAL): the test proves nothing", flushes.Load(), evals)
	}
}

// commandCalls reads calls=N of cmdstat_<name> from INFO commandstats.
func commandCalls(info, name string) int {
	for _, line := range strings.Split(info, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+name+":")
		if !ok {
			continue
		}
		for _, f := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(f, "calls="); ok {
				n, _ := strconv.Atoi(v)
				return n
			}
		}
	}
	return 0
}

// policyName names each failure policy for subtests.
var policyName = map[core.FailurePolicy]string{core.FailLocal: "local", core.FailOpen: "open", core.FailClosed: "closed"}

// breakerOpen reports whether one of st's circuit breakers is open.
func breakerOpen(st *redisstore.Store) bool {
	for _, open := range st.Stats().Breakers {
		if open {
			return true
		}
	}
	return false
}
