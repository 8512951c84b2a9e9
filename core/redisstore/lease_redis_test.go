package redisstore

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/internal/redistest"
)

// Lease mode on a real redis-server, started fresh by each test (so that
// INFO commandstats counts only the test), shared by three Stores with a
// go-redis client each: three processes.

const procs = 3

func threeStores(t *testing.T, cfg LeaseConfig) (*redis.Client, []*Store) {
	t.Helper()
	srv := redistest.StartServer(t)
	admin := srv.Client(t)
	stores := make([]*Store, procs)
	for i := range stores {
		client := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
		t.Cleanup(func() { _ = client.Close() })
		stores[i] = realStore(t, client, WithLeases(cfg))
		waitLive(t, stores[i])
	}
	return admin, stores
}

// scriptCalls is the number of script calls (EVALSHA and EVAL, each one
// round trip of a Take, a lease or a return) since CONFIG RESETSTAT.
func scriptCalls(tb testing.TB, admin *redis.Client) int {
	stats := commandStats(tb, admin)
	return stats["evalsha"] + stats["eval"]
}

// hammer runs workers goroutines per Store, each Taking key under l as
// fast as it can until stop, and records every decision with the local
// times it was made between.
type decision struct {
	store   int
	allowed bool
	t0, t1  int64 // µs, wall clock (Redis TIME runs on the same clock)
}

func hammer(t *testing.T, stores []*Store, workers int, key string, l store.Limit, d time.Duration) []decision {
	t.Helper()
	var mu sync.Mutex
	var all []decision
	var wg sync.WaitGroup
	var failed atomic.Value
	stop := time.Now().Add(d)
	for i, s := range stores {
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var mine []decision
				for time.Now().Before(stop) {
					t0 := time.Now().UnixMicro()
					r, err := s.Take(context.Background(), key, 1, specs(l)...)
					if err != nil {
						failed.Store(err)
						return
					}
					mine = append(mine, decision{i, r.Allowed, t0, time.Now().UnixMicro()})
				}
				mu.Lock()
				all = append(all, mine...)
				mu.Unlock()
			}()
		}
	}
	wg.Wait()
	if err := failed.Load(); err != nil {
		t.Fatal(err)
	}
	return all
}

// The test: one hot GCRA key, three processes, eight goroutines
// each, well past the limit. The admitted total stays within the
// documented bound of the exact figure (B + elapsed/T, give or take the
// units held in leases: 3·64), and Redis sees fewer than 1 script call
// per 20 decisions (see judgeCalls: judged on a run fast enough to show it).
//
// Redis decided each Take at a moment between its t0 and t1, so the upper
// bound takes the longest span the decisions can cover (the first t0 to
// the last t1) and the lower bound the shortest (the first t1 to the last
// t0). The lower bound also needs the processes to have kept the key
// saturated: a process that stalls holds its lease's units past the TTL,
// and while too few ask, the bucket refills past its burst or units go
// unasked for. A run in which no decision started for a lease TTL, or
// which made fewer than twice the decisions the key allows, is not judged
// by it, and another is made.
func TestRedisLeaseHotKeyThreeProcesses(t *testing.T) {
	redistest.Slow(t)
	l := store.Limit{Algorithm: store.GCRA, Rate: 400, Period: time.Second, Burst: 2000} // T = 2.5ms; lease cap min(64, 2000/16)
	const T, B, S = 2500, 2000, 64
	judged := false
	for attempt := 1; attempt <= callAttempts && !judged; attempt++ {
		admin, stores := threeStores(t, LeaseConfig{})
		resetStats(t, admin)
		ds := hammer(t, stores, 8, "hot", l, 1500*time.Millisecond)
		calls := scriptCalls(t, admin)

		first, last := ds[0].t0, ds[0].t1         // the longest span
		firstEnd, lastStart := ds[0].t1, ds[0].t0 // the shortest
		var admitted int64
		per := make([]int64, procs)
		starts := make([]int64, 0, len(ds))
		for _, d := range ds {
			first, last = min(first, d.t0), max(last, d.t1)
			firstEnd, lastStart = min(firstEnd, d.t1), max(lastStart, d.t0)
			starts = append(starts, d.t0)
			if d.allowed {
				admitted++
				per[d.store]++
			}
		}
		exact := B + (last-first)/T // what the exact path admits under this load, ±1
		t.Logf("attempt %d: %d decisions in %v, %d admitted (per process %v), exact figure %d, bound ±%d; %d script calls, 1 per %.0f decisions",
			attempt, len(ds), time.Duration(last-first)*time.Microsecond, admitted, per, exact, procs*S, calls, float64(len(ds))/float64(calls))
		if admitted > exact+1+procs*S {
			t.Errorf("admitted %d, over the bound %d + 1 + %d", admitted, exact, procs*S)
		}
		lowJudged := false
		low := B + max(0, lastStart-firstEnd)/T
		switch gap := longestGap(starts); {
		case gap >= defaultLeaseTTL:
			t.Logf("lower bound not judged: no decision started for %v (the processes stalled)", gap.Round(time.Millisecond))
		case int64(len(ds)) < 2*low:
			t.Logf("lower bound not judged: %d decisions, under twice the %d the key allows (the processes did not keep it saturated)", len(ds), low)
		case admitted < low-1-procs*S:
			t.Errorf("admitted %d, under %d - 1 - %d", admitted, low, procs*S)
			lowJudged = true
		default:
			lowJudged = true
		}
		judged = judgeCalls(t, l, time.Duration(last-first)*time.Microsecond, calls, len(ds)) && lowJudged
	}
}

// longestGap returns the longest time between consecutive decision
// starts (µs).
func longestGap(starts []int64) time.Duration {
	slices.Sort(starts)
	var gap int64
	for i := 1; i < len(starts); i++ {
		gap = max(gap, starts[i]-starts[i-1])
	}
	return time.Duration(gap) * time.Microsecond
}

// callAttempts is how many runs a lease test makes, at most, to get one
// fast enough to judge its script calls by (see judgeCalls).
const callAttempts = 3

// judgeCalls checks that lease mode made fewer than 1 script call per 20
// of the decisions made in elapsed by procs processes on one hot key under
// l (the exact path makes one per decision), and reports whether the run
// could be judged by it. Some calls follow the clock, not the decisions:
// a process whose lease was refused asks Redis again once the refusal's
// RetryAfter (at most the lease TTL) has passed, which is about when Redis
// frees a unit: at most R per P, plus a window's start (a fixed window
// frees units only then); and a lease ends, with a give-back, at most once
// per TTL. A process that makes fewer than 20 decisions for each such call
// (a busy machine; the sliding window, which frees a unit every P/R, needs
// about 26 000 decisions a second) cannot show the ratio, however lease
// mode behaves: that run is only logged, and the caller tries another.
func judgeCalls(t *testing.T, l store.Limit, elapsed time.Duration, calls, decisions int) bool {
	t.Helper()
	perProc := 2*int64(elapsed/defaultLeaseTTL) + 2
	if l.Algorithm != store.FixedWindow { // it frees units only when a window starts
		perProc += int64(elapsed) * l.Rate / int64(l.Period)
	}
	if l.Algorithm == store.FixedWindow || l.Algorithm == store.SlidingWindow {
		perProc += int64(elapsed/l.Period) + 1
	}
	clock := procs * perProc
	if int64(decisions) < 20*clock {
		t.Logf("%d decisions in %v: too few to judge the script calls by (the clock alone may cause %d calls; want at least 20 decisions per call)",
			decisions, elapsed.Round(time.Millisecond), clock)
		return false
	}
	if calls*20 >= decisions {
		t.Errorf("%d script calls for %d decisions: 1 per %.1f, want fewer than 1 per 20", calls, decisions, float64(decisions)/float64(calls))
	}
	return true
}

// FixedWindow and SlidingWindow under the same load: a lease never
// outlives its window, so no window admits more than Rate (the sliding
// window's current count never exceeds Rate either), and a fixed window
// loses at most the units held unspent when it ends: one in which a Take
// was denied (Redis had granted all Rate units of it) admitted at least
// Rate - 3·40. A window nobody exhausted (processes starved of CPU may
// not) says nothing about that.
func TestRedisLeaseWindowsThreeProcesses(t *testing.T) {
	redistest.Slow(t)
	for _, alg := range []store.Algorithm{store.FixedWindow, store.SlidingWindow} {
		t.Run(string(alg), func(t *testing.T) {
			const R, P, S = 640, 500_000, 40 // per 500ms; lease cap 640/16
			l := store.Limit{Algorithm: alg, Rate: R, Period: P * time.Microsecond}
			judged := false
			for attempt := 1; attempt <= callAttempts && !judged; attempt++ {
				admin, stores := threeStores(t, LeaseConfig{})
				resetStats(t, admin)
				ds := hammer(t, stores, 8, "hot", l, 2*time.Second)
				calls := scriptCalls(t, admin)
				perWin := map[int64]int64{}
				mayWin := map[int64]int64{} // admitted in the window or across its ends
				denied := map[int64]bool{}  // windows with a denial made within them
				var ambiguous int64
				first, last := ds[0].t0, ds[0].t1
				for _, d := range ds {
					first, last = min(first, d.t0), max(last, d.t1)
					switch {
					case !d.allowed:
						if d.t0/P == d.t1/P {
							denied[d.t0/P] = true
						}
					case d.t0/P == d.t1/P:
						perWin[d.t0/P]++
					default:
						ambiguous++ // made across a window's end
					}
					if d.allowed {
						for w := d.t0 / P; w <= d.t1/P; w++ {
							mayWin[w]++
						}
					}
				}
				var most int64
				for w, n := range perWin {
					most = max(most, n)
					if n > R {
						t.Errorf("window %d admitted %d, over %d", w, n, R)
					}
				}
				t.Logf("attempt %d: %d decisions, admitted per window %v (%d across a boundary), most %d of %d; %d script calls, 1 per %.0f decisions",
					attempt, len(ds), perWin, ambiguous, most, R, calls, float64(len(ds))/float64(calls))
				for w := range denied {
					if alg == store.FixedWindow && mayWin[w] < R-procs*S {
						t.Errorf("window %d denied a Take but admitted %d (with those across its ends), under %d - %d", w, mayWin[w], R, procs*S)
					}
				}
				if alg == store.FixedWindow && len(denied) == 0 {
					t.Logf("no window was exhausted: the processes did not keep up")
				}
				judged = judgeCalls(t, l, time.Duration(last-first)*time.Microsecond, calls, len(ds))
			}
		})
	}
}

// After the processes go idle, their leases end and the unspent units are
// back in Redis: a Peek sees exactly what the exact path would have left.
func TestRedisLeaseReturnedAfterIdle(t *testing.T) {
	redistest.Slow(t)
	for _, l := range []store.Limit{
		{Algorithm: store.GCRA, Rate: 1000, Period: time.Hour, Burst: 1000},
		{Algorithm: store.TokenBucket, Rate: 1000, Period: time.Hour, Burst: 1000},
		{Algorithm: store.FixedWindow, Rate: 1000, Period: time.Hour},
		{Algorithm: store.SlidingWindow, Rate: 1000, Period: time.Hour},
	} {
		t.Run(string(l.Algorithm), func(t *testing.T) {
			_, stores := threeStores(t, LeaseConfig{})
			hour := time.Now().Unix() / 3600
			var wg sync.WaitGroup
			for _, s := range stores {
				wg.Add(1)
				go func() { // 100 Takes each, leased from the 40th
					defer wg.Done()
					for range 100 {
						if r := takeOK(t, s, "idle", 1, l); !r.Allowed {
							t.Errorf("denied: %+v", r)
						}
					}
				}()
			}
			wg.Wait()
			start := time.Now()
			before := peekOK(t, stores[0], "idle", l)
			// The leases end a TTL after their last refill, and the sweepers
			// (every TTL/4) give them back and drop the idle key.
			after := before
			for after.Remaining != 1000-300-1 || idleKeys(stores) != 0 {
				if time.Since(start) > 5*time.Second {
					break
				}
				time.Sleep(10 * time.Millisecond)
				after = peekOK(t, stores[0], "idle", l)
			}
			if time.Now().Unix()/3600 != hour {
				t.Skip("the hour's window ended during the test")
			}
			t.Logf("Remaining after 300 Takes: %d while leases are held, %d once given back (%v later)",
				before.Remaining, after.Remaining, time.Since(start).Round(time.Millisecond))
			if after.Remaining != 1000-300-1 || before.Remaining >= after.Remaining {
				t.Errorf("Remaining (after a peek of 1) %d while held, %d after, want fewer then 699", before.Remaining, after.Remaining)
			}
			if n := idleKeys(stores); n != 0 {
				t.Errorf("%d idle keys still in lease mode", n)
			}
		})
	}
}

// heatUp Takes key under l through s until s leases it (HotTakes Takes
// within one TTL; Takes that straddle the end of a TTL count anew), and
// returns the number of Takes.
func heatUp(t *testing.T, s *Store, key string, l store.Limit) int64 {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	var n int64
	for s.lease.entry(key, l) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not in lease mode after %d Takes in 10s", key, n)
		}
		takeOK(t, s, key, 1, l)
		n++
	}
	return n
}

// idleKeys counts the keys the stores hold in lease mode.
func idleKeys(stores []*Store) (n int64) {
	for _, s := range stores {
		n += s.lease.keys.Load()
	}
	return n
}

func peekOK(tb testing.TB, s *Store, key string, l store.Limit) store.Result {
	tb.Helper()
	r, err := s.Peek(context.Background(), key, 1, specs(l)...)
	if err != nil {
		tb.Fatal(err)
	}
	return r
}

// A Reset through one Store drops the key's leases in all three at once
// or within a round trip, nothing is given back, and the next Takes see
// a fresh key.
func TestRedisLeaseResetEverywhere(t *testing.T) {
	_, stores := threeStores(t, LeaseConfig{})
	l := store.Limit{Algorithm: store.GCRA, Rate: 1000, Period: time.Hour, Burst: 1000}
	for _, s := range stores {
		heatUp(t, s, "reset", l)
	}
	if err := stores[1].Reset(context.Background(), "reset", specs(l)...); err != nil {
		t.Fatal(err)
	}
	if stores[1].lease.entry("reset", l) != nil {
		t.Error("the resetting Store kept its lease")
	}
	start := time.Now()
	for _, s := range stores {
		for s.lease.entry("reset", l) != nil {
			if time.Since(start) > 5*time.Second {
				t.Fatal("a Store kept its lease 5s after the Reset")
			}
			time.Sleep(100 * time.Microsecond)
		}
	}
	t.Logf("leases dropped everywhere %v after the Reset returned", time.Since(start))
	time.Sleep(defaultLeaseTTL) // nothing comes back
	if r := peekOK(t, stores[0], "reset", l); r.Remaining != 999 {
		t.Errorf("after the Reset: Remaining %d (after a peek of 1), want 999", r.Remaining)
	}
	for i, s := range stores { // the key is cold again: exact Takes
		if r := takeOK(t, s, "reset", 1, l); r.Remaining != int64(999-i) {
			t.Errorf("Take %d after the Reset: Remaining %d, want %d", i, r.Remaining, 999-i)
		}
	}
}

// Cold keys stay exact: 200 keys taken 30 times each by three processes
// (10 per process, under HotTakes) admit exactly their burst of 25, and no
// lease is ever taken; a hot key next to them does not change that.
func TestRedisLeaseColdKeysExact(t *testing.T) {
	_, stores := threeStores(t, LeaseConfig{})
	l := store.Limit{Algorithm: store.GCRA, Rate: 25, Period: time.Hour, Burst: 25}
	hotL := store.Limit{Algorithm: store.GCRA, Rate: 100_000, Period: time.Hour, Burst: 100_000}
	var admitted [200]atomic.Int64
	var cold, hot sync.WaitGroup
	var done atomic.Bool
	leased := make([]bool, procs)
	for i, s := range stores {
		cold.Add(1)
		hot.Add(1)
		go func() {
			defer cold.Done()
			for range 10 {
				for k := range admitted {
					if takeOK(t, s, "cold"+strconv.Itoa(k), 1, l).Allowed {
						admitted[k].Add(1)
					}
				}
			}
		}()
		go func() {
			defer hot.Done()
			for !done.Load() {
				takeOK(t, s, "hot", 1, hotL)
			}
			leased[i] = s.lease.entry("hot", hotL) != nil && s.lease.keys.Load() == 1
		}()
	}
	cold.Wait()
	done.Store(true)
	hot.Wait()
	for k := range admitted {
		if n := admitted[k].Load(); n != 25 {
			t.Errorf("cold key %d admitted %d, want 25", k, n)
		}
	}
	for i := range stores {
		if !leased[i] {
			t.Errorf("process %d: the hot key was not, or not the only key, in lease mode", i)
		}
	}
}

// On a Cluster, leases go to the master of the key's slot, under the same
// hash tag as the exact path's, and come back there.
func TestRedisLeaseCluster(t *testing.T) {
	redistest.Slow(t)
	cluster := redistest.SharedCluster(t)
	client := cluster.Client(t)
	s := realStore(t, client, WithLeases(LeaseConfig{}))
	waitLive(t, s)
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	// A capacity heatUp cannot spend even on a busy machine (it took 1,231
	// Takes once, past a burst of 1,000); it refills by 1,000 an hour, so
	// Remaining may have grown by what the test's time refilled.
	const capacity = 10_000
	l := store.Limit{Algorithm: store.TokenBucket, Rate: capacity, Period: 10 * time.Hour, Burst: capacity}
	began := time.Now()
	masters := map[string]bool{}
	var taken [12]int64
	for i := range taken {
		key := "lease:" + run + ":" + strconv.Itoa(i)
		taken[i] = heatUp(t, s, key, l)
		masters[cluster.MasterOf(t, s.lease.entry(key, l).rkey).Addr] = true
	}
	if len(masters) < 2 {
		t.Errorf("12 keys on %d masters", len(masters))
	}
	if err := s.Close(); err != nil { // gives every lease back
		t.Fatal(err)
	}
	exact := realStore(t, client)
	for i, n := range taken {
		want, refill := capacity-n-1, int64(time.Since(began).Seconds()*capacity/(10*3600))+1
		if r := peekOK(t, exact, "lease:"+run+":"+strconv.Itoa(i), l); r.Remaining < want || r.Remaining > want+refill {
			t.Errorf("key %d: Remaining %d after Close and %d Takes (after a peek of 1), want %d (+ up to %d refilled)", i, r.Remaining, n, want, refill)
		}
	}
}
