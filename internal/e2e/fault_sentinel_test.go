package e2e

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/internal/redistest"
)

// TestFaultSentinelFailover kills the master of a Sentinel-managed pair
// under load (a go-redis failover client, as users of Sentinel run it):
// every request is answered within the deadline plus slack while the
// Sentinels elect the replica (FailLocal decides meanwhile), decisions come
// from Redis again within seconds of the promotion, and they are exact.
func TestFaultSentinelFailover(t *testing.T) {
	s := redistest.StartSentinel(t)
	ctx := context.Background()
	rdb := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:            redistest.SentinelMaster,
		SentinelAddrs:         s.Addrs(),
		MaxRetries:            -1,
		ContextTimeoutEnabled: true,
		DialTimeout:           time.Second,
	})
	defer rdb.Close()
	st := newStore(t, rdb, faultTimeout)
	svc := newService(t, st, []store.Limit{{Algorithm: store.FixedWindow, Rate: 1 << 30, Period: longPeriod()}},
		core.WithFailurePolicy(core.FailLocal))
	defer svc.Close()
	exact := newService(t, st, faultLimits())
	defer exact.Close()
	hc := newHTTPClient(8)
	defer hc.CloseIdleConnections()
	exactBurst(t, ctx, exact, hc, "before", 2*faultLimit+20)

	stop := make(chan struct{})
	done := make(chan struct{})
	var rs []reply
	go func() {
		defer close(done)
		rs = load{client: hc, urls: []string{svc.URL}, workers: 8, stop: stop, key: func(i int) string { return "k" + strconv.Itoa(i%32) }}.run(ctx)
	}()
	time.Sleep(300 * time.Millisecond) // traffic before the fault
	before := svc.tally.snapshot()
	killAt := time.Now()
	s.Master.Kill(t)
	promotedAt := s.WaitPromoted(t, 30*time.Second)
	svc.tally.watch()
	back, ok := svc.tally.waitRecovered(30 * time.Second)
	time.Sleep(300 * time.Millisecond) // traffic after the recovery, judged with the outage's
	close(stop)
	<-done
	d := svc.tally.snapshot().sub(before)
	all := summarize(rs)
	t.Logf("replica promoted %v after the kill; whole run %s", promotedAt.Sub(killAt).Round(time.Millisecond), all)
	t.Logf("decisions from the kill on: %s", d)
	if !ok {
		t.Fatalf("no decision from Redis within 30 s of the promotion; last error: %v", d.lastErr)
	}
	t.Logf("FIGURE sentinel: decisions from Redis again %v after the promotion (%v after the kill)",
		back.Sub(promotedAt).Round(time.Millisecond), back.Sub(killAt).Round(time.Millisecond))
	if back.Sub(promotedAt) > 5*time.Second {
		t.Errorf("decisions from Redis again %v after the promotion, want under 5 s", back.Sub(promotedAt))
	}
	if all.errs != 0 {
		t.Errorf("%d requests got no HTTP answer (first: %v)", all.errs, all.first)
	}
	if m := all.max(); m > faultTimeout+faultSlack {
		t.Errorf("slowest answer took %v, want at most %v", m, faultTimeout+faultSlack)
	}
	if d.storeErrs == 0 || d.byOutcome[core.OutcomeFallback] != d.storeErrs {
		t.Errorf("%d store failures, %d fallback decisions: want some, all by the fallback", d.storeErrs, d.byOutcome[core.OutcomeFallback])
	}
	exactBurst(t, ctx, exact, hc, "after", 2*faultLimit+20)
}
