package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/internal/fallback"
	"github.com/sluicehq/sluice/internal/redistest"
)

// recordClients returns a client of a real redis-server (its own) and one
// of miniredis, by name.
func recordClients(t *testing.T) map[string]*redis.Client {
	m := miniredis.RunT(t)
	mini := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = mini.Close() })
	return map[string]*redis.Client{"redis": sharedClient(t), "miniredis": mini}
}

// recordCases are calls of each charging script: a lean one, the take
// script for two limits, and a stamped Charge.
var recordCases = []struct {
	name    string
	limits  []store.Limit
	stamped bool
}{
	{"lean gcra", []store.Limit{store.PerMinute(10)}, false},
	{"lean fixed window", []store.Limit{{Algorithm: store.FixedWindow, Rate: 10, Period: time.Hour}}, false},
	{"take, two limits", []store.Limit{store.PerMinute(10), {Algorithm: store.SlidingLog, Rate: 20, Period: time.Hour}}, false},
	{"charge", []store.Limit{{Algorithm: store.SlidingLog, Rate: 10, Period: time.Hour}}, true},
}

// recordedCall returns the recorded call of a Take (or Charge) of n of key.
func recordedCall(t *testing.T, s *Store, key string, n int64, limits []store.Spec, stamped bool) (scriptCall, string) {
	t.Helper()
	c, err := s.call(key, n, limits)
	if stamped {
		c, err = s.takeCall(key, n, limits, true)
	}
	if err != nil {
		t.Fatal(err)
	}
	if !c.recordable(n) {
		t.Fatalf("%v: not recordable", limits)
	}
	rk := recordKey(c.key)
	return c.recorded(rk), rk
}

func remaining(t *testing.T, s *Store, key string, limits []store.Spec) int64 {
	t.Helper()
	r, err := s.peekRedis(context.Background(), key, 0, limits...)
	if err != nil {
		t.Fatal(err)
	}
	return r.Remaining
}

// A recorded call sent twice runs once: the second returns the first's
// reply. A fenced call never runs.
func TestRecordedCallRunsOnce(t *testing.T) {
	ctx := context.Background()
	for name, client := range recordClients(t) {
		s := realStore(t, client)
		if err := loadScripts(ctx, client); err != nil {
			t.Fatal(err)
		}
		for _, rc := range recordCases {
			t.Run(name+"/"+rc.name, func(t *testing.T) {
				limits := specs(rc.limits...)
				key := recordPrefix(t) + "k"
				c, rk := recordedCall(t, s, key, 1, limits, rc.stamped)
				first, err := client.Do(ctx, c.cmd...).Result()
				if err != nil {
					t.Fatal(err)
				}
				again, err := client.Do(ctx, fresh(c.cmd)...).Result()
				if err != nil {
					t.Fatal(err)
				}
				if !equalReplies(first, again) {
					t.Errorf("sent again: %v, want the first reply %v", again, first)
				}
				want := specs(rc.limits[0])[0].Capacity() - 1
				if got := remaining(t, s, key, limits); got != want {
					t.Errorf("after the call sent twice: %d left, want %d (charged once)", got, want)
				}
				if ttl := client.PTTL(ctx, rk).Val(); ttl <= 0 || ttl > recordTTL {
					t.Errorf("record TTL %v, want in (0, %v]", ttl, recordTTL)
				}
				rec, err := fenceScript.Run(ctx, client, []string{rk}, recordTTL.Milliseconds()).Result()
				if v, ok := rec.([]any); err != nil || !ok || len(v) < 3 {
					t.Errorf("fence of a call that ran: %v, %v; want its record", rec, err)
				}

				fenced, rk2 := recordedCall(t, s, key, 1, limits, rc.stamped)
				if v, err := fenceScript.Run(ctx, client, []string{rk2}, recordTTL.Milliseconds()).Result(); err != nil || v != int64(0) {
					t.Fatalf("fence of a call that did not run: %v, %v; want 0", v, err)
				}
				if _, err := client.Do(ctx, fenced.cmd...).Result(); err == nil || !strings.Contains(err.Error(), "SLUICE fenced") {
					t.Errorf("a fenced call: %v, want it refused", err)
				}
				if got := remaining(t, s, key, limits); got != want {
					t.Errorf("after a fenced call: %d left, want %d", got, want)
				}
			})
		}
	}
}

// recordPrefix returns a key prefix no other test uses.
func recordPrefix(t *testing.T) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "record-" + hex.EncodeToString(b[:]) + ":"
}

func equalReplies(a, b any) bool {
	x, ok1 := a.([]any)
	y, ok2 := b.([]any)
	if !ok1 || !ok2 {
		return a == b
	}
	if len(x) != len(y) {
		return false
	}
	for i := range x {
		if x[i] != y[i] {
			return false
		}
	}
	return true
}

// Settle says what is left to charge of what the fallback owes for a
// recorded call whose reply was lost: nothing when it charged (giving back
// what it charged for a request the fallback refused), all when it did not
// run (and then never will) or was refused.
func TestSettleRecordedCall(t *testing.T) {
	ctx := context.Background()
	for name, client := range recordClients(t) {
		s := realStore(t, client)
		if err := loadScripts(ctx, client); err != nil {
			t.Fatal(err)
		}
		for _, rc := range recordCases {
			limits := specs(rc.limits...)
			capacity := specs(rc.limits[0])[0].Capacity()
			for _, c := range []struct {
				name     string
				ran      bool
				full     bool  // the key has nothing left: the call is refused
				owe      int64 // of 2 sent
				rest     int64
				leftWant int64 // of capacity, after settling (before charging rest)
			}{
				{"ran, admitted locally", true, false, 2, 0, capacity - 2},
				{"ran, refused locally", true, false, 0, 0, capacity},
				{"did not run", false, false, 2, 2, capacity},
				{"ran and refused", true, true, 2, 2, 0},
			} {
				t.Run(name+"/"+rc.name+"/"+c.name, func(t *testing.T) {
					key := recordPrefix(t) + "k"
					if c.full {
						if _, err := s.takeRedis(ctx, key, capacity, limits...); err != nil {
							t.Fatal(err)
						}
					}
					call, rk := recordedCall(t, s, key, 2, limits, rc.stamped)
					if c.ran {
						if err := client.Do(ctx, call.cmd...).Err(); err != nil {
							t.Fatal(err)
						}
					}
					var u *fallback.Uncertain
					if err := s.uncertainError(errors.New("lost"), call, 2, key, limits, rk); !errors.As(err, &u) || u.Settle == nil {
						t.Fatalf("uncertainError: %v, want a fallback.Uncertain with Settle", err)
					}
					rest, err := u.Settle(ctx, c.owe)
					if err != nil || rest != c.rest {
						t.Fatalf("Settle(%d) = %d, %v; want %d", c.owe, rest, err, c.rest)
					}
					if got := remaining(t, s, key, limits); got != c.leftWant {
						t.Errorf("after settling: %d left, want %d", got, c.leftWant)
					}
					if !c.ran { // fenced: it never runs
						if err := client.Do(ctx, fresh(call.cmd)...).Err(); err == nil {
							t.Error("the call ran after it was settled")
						}
					}
				})
			}
		}
	}
}

// After an uncertain outcome on a server, its charges are recorded for a
// while; peeks never are.
func TestRecordingAfterUncertainOutcome(t *testing.T) {
	ctx := context.Background()
	client := sharedClient(t)
	s := realStore(t, client)
	key := recordPrefix(t) + "k"
	limits := specs(store.PerMinute(10))
	records := func() int {
		ks, err := client.Keys(ctx, s.redisKey(key, "")+"*:r:*").Result()
		if err != nil {
			t.Fatal(err)
		}
		return len(ks)
	}
	if _, err := s.takeRedis(ctx, key, 1, limits...); err != nil || records() != 0 {
		t.Fatalf("a healthy server: %d records (%v), want none", records(), err)
	}
	s.health.nodeFor(ctx, key).arm()
	if _, err := s.peekRedis(ctx, key, 0, limits...); err != nil || records() != 0 {
		t.Fatalf("a peek: %d records (%v), want none", records(), err)
	}
	if _, err := s.takeRedis(ctx, key, 1, limits...); err != nil || records() != 1 {
		t.Fatalf("a charge after an uncertain outcome: %d records (%v), want 1", records(), err)
	}
}

// A call answered after more than half of its time has its server record
// charges (slow), so that the next, which may run out of time, is
// recorded already; one answered quickly does not. Redis is paused for
// 600 ms under a call with a 1 s deadline (CLIENT PAUSE holds its
// connection's commands).
func TestRecordingAfterSlowAnswer(t *testing.T) {
	srv := redistest.StartServer(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	t.Cleanup(func() { _ = client.Close() })
	s := realStore(t, client)
	ctx := context.Background()
	limits := specs(store.PerMinute(10))
	if _, err := s.takeRedis(ctx, "quick", 1, limits...); err != nil {
		t.Fatal(err)
	}
	if s.health.nodeFor(ctx, "quick").recording() {
		t.Fatal("recording after a call answered at once")
	}
	srv.Pause(t, 600*time.Millisecond)
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if _, err := s.takeRedis(cctx, "slow", 1, limits...); err != nil {
		t.Logf("the paused call failed (%v): a machine too busy to judge; recording anyway: %v", err, s.health.nodeFor(ctx, "slow").recording())
		return
	}
	if !s.health.nodeFor(ctx, "slow").recording() {
		t.Error("no recording after a call answered in more than half its time")
	}
}

// slow tells a call that used more than half of its time.
func TestSlow(t *testing.T) {
	for _, c := range []struct {
		ago  time.Duration // the call started this long ago
		time time.Duration // with this much time (0: no deadline)
		want bool
	}{
		{100 * time.Millisecond, time.Second, false},
		{600 * time.Millisecond, time.Second, true},
		{600 * time.Millisecond, 0, false},
	} {
		ctx := context.Background()
		start := monoMicros() - c.ago.Microseconds()
		if c.time > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithDeadline(ctx, time.Now().Add(c.time-c.ago))
			defer cancel()
		}
		if got := slow(ctx, start); got != c.want {
			t.Errorf("slow(started %v ago with %v) = %v, want %v", c.ago, c.time, got, c.want)
		}
	}
}

// A charge to a server that is recording, of a key whose slot is
// migrating, is decided: its record key, a new key the migrating master
// does not hold, splits the recorded call's keys between the two masters
// (TRYAGAIN for as long as the slot migrates), so the call is sent as it
// would be unrecorded, one key at a time when it has several. Each Take's
// deadline is far beyond its few round trips.
func TestRecordedChargeOnMigratingSlot(t *testing.T) {
	t.Parallel()
	cluster := redistest.StartCluster(t, 2, 0)
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs, MaxRetries: -1})
	t.Cleanup(func() { _ = client.Close() })
	s := realStore(t, client)
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		limits []store.Spec
	}{
		{"lean", specs(store.Limit{Algorithm: store.FixedWindow, Rate: 10, Period: time.Hour})},
		{"take", specs(store.Limit{Algorithm: store.FixedWindow, Rate: 10, Period: time.Hour}, store.PerMinute(10))},
	} {
		key := "migrating-" + tc.name
		if _, err := s.takeRedis(ctx, key, 1, tc.limits...); err != nil { // its state, on its master
			t.Fatal(err)
		}
		state := s.redisKey(key, "")
		_, stable := migrating(t, cluster, state)
		s.health.nodeFor(ctx, state).arm()
		tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		r, err := s.takeRedis(tctx, key, 1, tc.limits...)
		cancel()
		left := r.Remaining
		if r.PerLimit != nil {
			left = r.PerLimit[0].Remaining
		}
		if err != nil || !r.Allowed || left != 8 {
			t.Errorf("%s: a recorded charge on a migrating slot: %+v, %v; want allowed, 8 left", tc.name, r, err)
		}
		stable()
	}
}
