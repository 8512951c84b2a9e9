package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/core/store"
)

// Lease mode on miniredis, where time moves only when told: the store's
// clock (x.now) and Redis' TIME move together.

// leaseCfg is a small, fixed-size lease mode for the tests: 4 Takes within
// a second make a key hot, and a lease holds 16 units.
var leaseCfg = LeaseConfig{MaxUnits: 16, MinUnits: 16, TTL: time.Second, HotTakes: 4}

// waitLive waits until s may take leases: it has subscribed to resets.
func waitLive(tb testing.TB, s *Store) {
	tb.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !s.lease.live.Load() {
		if time.Now().After(deadline) {
			tb.Fatal("lease mode did not subscribe to resets within 10s")
		}
		time.Sleep(time.Millisecond)
	}
}

// newLeaseMini is newMini in lease mode, subscribed to resets.
func newLeaseMini(tb testing.TB, cfg LeaseConfig) *mini {
	tb.Helper()
	x := newMini(tb, WithLeases(cfg))
	waitLive(tb, x.store)
	return x
}

// settle waits for the refills ahead of need that Takes started.
func (x *mini) settle() { x.store.lease.bg.Wait() }

// held returns the units x's lease of key under l holds, and whether x
// has one.
func (x *mini) held(key string, l store.Limit) (int64, bool) {
	e := x.store.lease.entry(key, l)
	if e == nil {
		return 0, false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.units, true
}

// entry returns the lease entry of key under lim, or nil.
func (l *leases) entry(key string, limit store.Limit) *lease {
	lim := specs(limit)[0]
	sh := &l.shards[l.hash(key, lim)%leaseShards]
	sh.mu.RLock()
	defer sh.mu.RUnlock()
	return sh.m[leaseKey{key, lim}]
}

// tat reads a GCRA state from miniredis.
func (x *mini) tat(key string, l store.Limit) int64 {
	x.tb.Helper()
	v, err := x.m.Get(x.keyOf(key, l))
	if err != nil {
		return 0
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		x.tb.Fatalf("state %q: %v", v, err)
	}
	return n
}

func TestLeaseConfigChecked(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer client.Close()
	for _, c := range []LeaseConfig{
		{MaxUnits: 1}, {MaxUnits: -1}, {MinUnits: 65}, {MaxUnits: 8, MinUnits: 9}, {Share: 1},
		{TTL: time.Millisecond}, {TTL: 2 * time.Minute}, {HotTakes: -1}, {MaxKeys: -2}, {MaxKeys: 1<<20 + 1},
	} {
		if s, err := New(client, WithLeases(c)); err == nil {
			_ = s.Close()
			t.Errorf("WithLeases(%+v) accepted", c)
		}
	}
	s, err := New(client, WithLeases(LeaseConfig{}))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	want := LeaseConfig{defaultLeaseMaxUnits, defaultLeaseMinUnits, defaultLeaseShare, defaultLeaseTTL, defaultLeaseHotTakes, defaultLeaseMaxKeys}
	if s.lease.cfg != want {
		t.Errorf("defaults %+v, want %+v", s.lease.cfg, want)
	}
	if off, _ := New(client); off.lease != nil {
		t.Error("lease mode on without WithLeases")
	}
}

// A hot GCRA key: the HotTakes-th Take takes a lease of 16 in one call,
// the next 15 Takes are local, and Redis' TAT counts the whole lease; when
// the lease ends unspent units go back.
func TestMiniLeaseGCRA(t *testing.T) {
	x := newLeaseMini(t, leaseCfg)
	l := store.Limit{Algorithm: store.GCRA, Rate: 1000, Period: 1000 * time.Second, Burst: 1000} // T = 1s, lease cap 1000/16 → 16
	const T = 1_000_000
	now := x.now.UnixMicro()
	for i := 1; i <= 3; i++ { // exact, one script call each
		check(t, "exact "+strconv.Itoa(i), x.take("k", 1, l), want{true, 1000, int64(1000 - i), 0, time.Duration(i) * time.Second, 0})
	}
	if _, ok := x.held("k", l); ok {
		t.Fatal("leased before HotTakes")
	}
	// 4th: a lease of 16 (one call), this Take gets one of them.
	check(t, "lease", x.take("k", 1, l), want{true, 1000, 1000 - 4, 0, 19 * time.Second, 0})
	if got := x.tat("k", l); got != now+19*T {
		t.Errorf("TAT after the lease = now+%dµs, want now+19s", got-now)
	}
	if u, _ := x.held("k", l); u != 15 {
		t.Errorf("held %d, want 15", u)
	}
	calls := x.store.lease.calls.Load()
	for i := 5; i <= 10; i++ { // local: Remaining = Redis' after the lease + what is held
		check(t, "local "+strconv.Itoa(i), x.take("k", 1, l), want{true, 1000, int64(1000 - i), 0, 19 * time.Second, 0})
	}
	if c := x.store.lease.calls.Load() - calls; c != 0 {
		t.Errorf("%d lease calls for local Takes", c)
	}
	// The lease ends with 9 units unspent; the sweep gives them back: the
	// TAT is where 10 exact Takes would have left it.
	x.advance(time.Second)
	x.store.lease.sweep(x.store.clock(), false)
	if got := x.tat("k", l); got != now+10*T {
		t.Errorf("TAT after the return = now+%dµs, want now+10s", got-now)
	}
	x.advance(time.Second) // idle for a TTL: the key leaves lease mode
	x.store.lease.sweep(x.store.clock(), false)
	if _, ok := x.held("k", l); ok || x.store.lease.keys.Load() != 0 {
		t.Error("an idle key kept its entry")
	}
}

// peek returns Redis' figures for key under l, as Status would see them.
func (x *mini) peek(key string, l store.Limit) store.Result {
	x.tb.Helper()
	r, err := x.store.Peek(context.Background(), key, 1, specs(l)...)
	if err != nil {
		x.tb.Fatal(err)
	}
	return r
}

// heat makes key hot under l: HotTakes-1 exact Takes, then the Take that
// leases. It returns the last Result.
func (x *mini) heat(key string, l store.Limit) store.Result {
	x.tb.Helper()
	waitLive(x.tb, x.store)
	var r store.Result
	for range x.store.lease.cfg.HotTakes {
		r = x.take(key, 1, l)
	}
	if _, ok := x.held(key, l); !ok {
		x.tb.Fatalf("%s is not in lease mode after %d Takes", key, x.store.lease.cfg.HotTakes)
	}
	return r
}

// TokenBucket: a lease takes tokens, a return adds them back after the
// refill, as if only the spent ones had been taken.
func TestMiniLeaseTokenBucket(t *testing.T) {
	x := newLeaseMini(t, leaseCfg)
	l := store.Limit{Algorithm: store.TokenBucket, Rate: 1000, Period: 1000 * time.Second, Burst: 1000} // 1 token/s
	check(t, "lease", x.heat("k", l), want{true, 1000, 996, 0, 19 * time.Second, 0})
	for range 6 {
		x.take("k", 1, l)
	}
	x.advance(time.Second) // one token back; the lease (9 left) ends
	x.store.lease.sweep(x.store.clock(), false)
	// 10 taken, 1 refilled: 991, and no unit of the lease is lost.
	if r := x.peek("k", l); r.Remaining != 991-1 || !r.Allowed {
		t.Errorf("after the return: peek %+v, want Remaining 990 (991 less the peeked 1)", r)
	}
}

// FixedWindow: a lease never outlives its window; a return only counts in
// the window it was granted in.
func TestMiniLeaseFixedWindow(t *testing.T) {
	cfg := leaseCfg
	cfg.TTL = 30 * time.Second
	x := newLeaseMini(t, cfg)
	l := store.Limit{Algorithm: store.FixedWindow, Rate: 320, Period: 10 * time.Second} // lease cap 320/16 = 20 → 16
	x.advance(8 * time.Second)                                                          // 2 s before the window ends
	check(t, "lease", x.heat("k", l), want{true, 320, 316, 0, 2 * time.Second, 0})
	if v := x.fixedState("k", l); v != "19" {
		t.Errorf("window state %s, want a count of 19 (3 exact + a lease of 16)", v)
	}
	x.take("k", 1, l)
	x.advance(2 * time.Second) // the next window: the 14 units left are void
	check(t, "new window", x.take("k", 1, l), want{true, 320, 319, 0, 10 * time.Second, 0})
	if u, _ := x.held("k", l); u != 15 {
		t.Errorf("held %d in the new window, want 15 (a new lease of 16, less this Take)", u)
	}
	if v := x.fixedState("k", l); v != "16" {
		t.Errorf("new window state %s, want a count of 16 (the old window's units are not given back to it)", v)
	}
	// Give back within the window: the count drops to what was spent.
	x.store.lease.sweep(x.store.clock()+int64(30*time.Second/time.Microsecond), false)
	if v := x.fixedState("k", l); v != "1" {
		t.Errorf("state after the return %s, want a count of 1", v)
	}
}

// fixedState is a fixed window's count as "<count>", or what its hash
// holds when that is not one field.
func (x *mini) fixedState(key string, l store.Limit) string {
	x.tb.Helper()
	h, _ := x.m.HKeys(x.keyOf(key, l))
	if len(h) != 1 {
		return fmt.Sprintf("fields %q", h)
	}
	return x.m.HGet(x.keyOf(key, l), h[0])
}

// SlidingWindow: a return lowers the current window's count only.
func TestMiniLeaseSlidingWindow(t *testing.T) {
	x := newLeaseMini(t, leaseCfg)
	l := store.Limit{Algorithm: store.SlidingWindow, Rate: 320, Period: 10 * time.Second}
	x.take("k", 5, l) // cost 5 is leasable too (at most a lease): counted, not yet hot
	x.advance(10 * time.Second)
	x.heat("k", l) // the previous window holds 5
	x.take("k", 2, l)
	w := x.now.UnixMicro() / 10_000_000
	if v, _ := x.m.Get(x.keyOf("k", l)); v != strconv.FormatInt(w, 10)+":19:5" {
		t.Errorf("state %q, want %d:19:5", v, w)
	}
	x.advance(time.Second)
	x.store.lease.sweep(x.store.clock(), false)
	if v, _ := x.m.Get(x.keyOf("k", l)); v != strconv.FormatInt(w, 10)+":6:5" {
		t.Errorf("state after the return %q, want %d:6:5 (3 exact + 1 + 2 spent)", v, w)
	}
}

// An exhausted hot key: the refused refill's denial is repeated locally,
// counted down, until its RetryAfter (at most a TTL); then Redis is asked.
func TestMiniLeaseDenial(t *testing.T) {
	x := newLeaseMini(t, leaseCfg)
	l := store.Limit{Algorithm: store.GCRA, Rate: 64, Period: 64 * time.Second, Burst: 64} // T = 1s, lease cap 4
	for i := 0; ; i++ {
		if r := x.take("k", 1, l); !r.Allowed {
			if i != 64 {
				t.Fatalf("denied after %d, want 64", i)
			}
			check(t, "refused", r, want{false, 64, 0, time.Second, 64 * time.Second, 0})
			break
		}
		x.settle()
	}
	calls := x.store.lease.calls.Load()
	x.advance(400 * time.Millisecond)
	check(t, "repeated", x.take("k", 1, l), want{false, 64, 0, 600 * time.Millisecond, 63600 * time.Millisecond, 0})
	check(t, "repeated, cost 2", x.take("k", 2, l), want{false, 64, 0, 600 * time.Millisecond, 63600 * time.Millisecond, 0})
	if c := x.store.lease.calls.Load() - calls; c != 0 {
		t.Errorf("%d script calls for repeated denials", c)
	}
	x.advance(600 * time.Millisecond)
	check(t, "after RetryAfter", x.take("k", 1, l), want{true, 64, 0, 0, 64 * time.Second, 0})
	if c := x.store.lease.calls.Load() - calls; c != 1 {
		t.Errorf("%d script calls after RetryAfter, want 1", c)
	}
}

// What lease mode leaves to the exact path: several limits, peeks,
// penalties, LeakyBucket, SlidingLog, costs above a lease, limits too
// small to lease, invalid limits.
func TestMiniLeasePassThrough(t *testing.T) {
	x := newLeaseMini(t, leaseCfg)
	big := store.Limit{Algorithm: store.GCRA, Rate: 1000, Period: time.Hour, Burst: 1000}
	for _, c := range []struct {
		name   string
		n      int64
		limits []store.Limit
	}{
		{"two limits", 1, []store.Limit{big, store.PerHour(500)}},
		{"peek", 0, []store.Limit{big}},
		{"penalty", 1, []store.Limit{{Algorithm: store.GCRA, Rate: 1000, Period: time.Hour, Penalty: time.Second}}},
		{"leaky", 1, []store.Limit{{Algorithm: store.LeakyBucket, Rate: 1000, Period: time.Hour}}},
		{"sliding log", 1, []store.Limit{{Algorithm: store.SlidingLog, Rate: 1000, Period: time.Hour}}},
		{"cost above a lease", 17, []store.Limit{big}},
		{"too small", 1, []store.Limit{store.PerHour(31)}}, // 31/16 < 2
	} {
		key := strings.ReplaceAll(c.name, " ", "-")
		for range 3 * leaseCfg.HotTakes {
			if _, err := x.store.Take(context.Background(), key, c.n, specs(c.limits...)...); err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
		}
		if k := x.store.lease.keys.Load(); k != 0 || x.store.lease.calls.Load() != 0 {
			t.Fatalf("%s: %d keys in lease mode, %d lease calls", c.name, k, x.store.lease.calls.Load())
		}
	}
	bad := store.Limit{Algorithm: store.GCRA, Rate: 10, Period: time.Second + 1} // not whole µs
	for range leaseCfg.HotTakes {
		if _, err := x.store.Take(context.Background(), "bad", 1, specs(bad)...); !errors.Is(err, store.ErrInvalidLimit) {
			t.Fatalf("invalid limit: error %v", err)
		}
	}
}

// A Reset drops the key's leases at once in its Store and, through the
// announcement, in another one; dropped units are not given back.
func TestMiniLeaseResetDrops(t *testing.T) {
	x := newLeaseMini(t, leaseCfg)
	client := redis.NewClient(&redis.Options{Addr: x.m.Addr(), MaxRetries: -1})
	defer client.Close()
	other := realStore(t, client, WithLeases(leaseCfg))
	other.clock = x.store.clock
	l := store.Limit{Algorithm: store.GCRA, Rate: 1000, Period: 1000 * time.Second, Burst: 1000}
	x.heat("k", l)
	y := &mini{tb: t, m: x.m, client: client, store: other, now: x.now}
	y.heat("k", l)
	x.heat("other-key", l)
	if err := x.store.Reset(context.Background(), "k", specs(l)...); err != nil {
		t.Fatal(err)
	}
	if _, ok := x.held("k", l); ok {
		t.Error("the resetting Store kept its lease")
	}
	deadline := time.Now().Add(5 * time.Second)
	for other.lease.keys.Load() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the other Store kept its lease 5s after the Reset")
		}
		time.Sleep(time.Millisecond)
	}
	if _, ok := x.held("other-key", l); !ok {
		t.Error("a Reset of k dropped the lease of another key")
	}
	// Nothing given back: the key is fresh, and the next Takes are exact.
	check(t, "after reset", x.take("k", 1, l), want{true, 1000, 999, 0, time.Second, 0})
	if x.tat("k", l) != x.now.UnixMicro()+1_000_000 {
		t.Error("a dropped lease was given back")
	}
}

// Close gives every lease back.
func TestMiniLeaseCloseGivesBack(t *testing.T) {
	x := newLeaseMini(t, leaseCfg)
	l := store.Limit{Algorithm: store.GCRA, Rate: 1000, Period: 1000 * time.Second, Burst: 1000}
	now := x.now.UnixMicro()
	x.heat("k", l) // 3 exact + 1 of a lease of 16
	if err := x.store.Close(); err != nil {
		t.Fatal(err)
	}
	if got := x.tat("k", l); got != now+4_000_000 {
		t.Errorf("TAT after Close = now+%dµs, want now+4s", got-now)
	}
	_ = x.store.Close() // twice is fine
}

// Under steady use a refill starts when a quarter of the lease is left, so
// that Takes do not wait; the lease size follows the local rate.
func TestMiniLeaseRefillAheadAndSize(t *testing.T) {
	x := newLeaseMini(t, LeaseConfig{MinUnits: 4, MaxUnits: 64, TTL: time.Second, HotTakes: 4})
	l := store.Limit{Algorithm: store.GCRA, Rate: 100_000, Period: time.Hour, Burst: 100_000}
	x.heat("k", l) // a lease of 4 (HotTakes), 3 left
	x.take("k", 1, l)
	x.take("k", 1, l) // 1 left: a refill starts ahead, and tops the lease up to 4
	x.settle()
	if u, _ := x.held("k", l); u != 4 || x.store.lease.calls.Load() != 2 {
		t.Errorf("held %d after %d calls, want 4 after 2 (topped up ahead of need)", u, x.store.lease.calls.Load())
	}
	for range 400 { // 20 Takes per 100ms: 200 per TTL
		x.take("k", 1, l)
		x.settle()
		x.advance(5 * time.Millisecond)
	}
	e := x.store.lease.entry("k", l)
	e.mu.Lock()
	size := e.size
	e.mu.Unlock()
	if size != 64 {
		t.Errorf("lease size %d, want 64 (the cap; the local rate is 200 per TTL)", size)
	}
	if c := x.store.lease.calls.Load(); c > 400/20 {
		t.Errorf("%d lease calls for 400 Takes, want at most 20", c)
	}
}

// A Take whose context has ended fails, and spends nothing.
func TestMiniLeaseCanceled(t *testing.T) {
	x := newLeaseMini(t, leaseCfg)
	l := store.Limit{Algorithm: store.GCRA, Rate: 1000, Period: 1000 * time.Second, Burst: 1000}
	x.heat("k", l)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := x.store.Take(ctx, "k", 1, specs(l)...); !errors.Is(err, context.Canceled) {
		t.Errorf("error %v, want context.Canceled", err)
	}
	if u, _ := x.held("k", l); u != 15 {
		t.Errorf("held %d, want 15", u)
	}
}
