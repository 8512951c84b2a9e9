package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/redistest"
)

const (
	// soakEnv sets TestSoakStarvedInstance's duration (SLUICE_SOAK=60s for
	// issue 17's full run); soakDefault keeps the suite within its budget.
	soakEnv     = "SLUICE_SOAK"
	soakDefault = 15 * time.Second
	// soakRate is the requests per second the load generator aims at,
	// over soakKeys client keys.
	soakRate = 600
	soakKeys = 2000
	// soakHotFW and soakHotGCRA are the keys that get half of each route's
	// requests: 150/s over 25 keys is 6/s each on /fw (20 per 10 s
	// allowed), over 5 keys 30/s each on /gcra (10/s allowed after a burst
	// of 30), so that they meet their limits even when the load generator
	// achieves a third of its aim.
	soakHotFW   = 25
	soakHotGCRA = 5
	// soakWorkers bounds the requests in flight.
	soakWorkers = 128
)

// TestSoakStarvedInstance (issue 17): one instance, a child process
// starved of CPU by GOMAXPROCS=1 and a goroutine looping without end
// beside its server (on whatever else the machine runs), limits requests
// on one healthy redis-server with the defaults (FailLocal, a 100 ms
// timeout, the default breaker): a fixed window of 20 per 10 s on /fw and
// a GCRA of 300 per 30 s (burst 30) on /gcra, per client key. The load
// generator aims at 600 requests/s over 2000 keys for SLUICE_SOAK (15 s
// by default), half of each route's requests on a few hot keys so that
// they meet their limits throughout.
//
// It fails on any over-admission: a fixed window admitting more than 20
// for a key (each admission placed in its window from the store's answer
// and checked against when it was decided), or a key's GCRA admitting
// more within any span than the burst plus the span over the emission
// interval; on any decision that met an open breaker; and on fewer 200s
// counted by the instance than the clients got; and when no key reached
// its limit (the soak tested nothing). All but the 200s are judged while
// the instance runs within its 100 ms deadline: it never stood still for
// it (a 1 ms sleep oversleeping by 100 ms or more) and saw no Take's
// deadline 50 ms or more after it passed; past that they are logged. A
// load generator that falls behind sends fewer requests: the achieved
// rate is reported, not judged.
func TestSoakStarvedInstance(t *testing.T) {
	dur := soakDefault
	if v := os.Getenv(soakEnv); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			t.Fatalf("%s=%q: want a positive duration such as 60s", soakEnv, v)
		}
		dur = d
	}
	srv := redistest.StartServer(t)
	url := startSoakInstance(t, "redis://"+srv.Addr+"/0")
	hc := newHTTPClient(soakWorkers)
	defer hc.CloseIdleConnections()

	loads, pings := sampleLoad(), pingRedis(srv.Client(t))
	run := uniq("soak")
	start := time.Now()
	rs, skipped := pacedLoad(hc, url, run, dur)
	elapsed := time.Since(start)
	la, pl := loads(), pings()

	rep := fetchSoakReport(t, url)
	plain := make([]reply, len(rs))
	for i, r := range rs {
		plain[i] = r.reply
	}
	st := summarize(plain)
	t.Logf("aimed at %d requests/s for %v: sent %d (%.0f/s achieved, %d ticks' requests not sent: every worker busy); %s",
		soakRate, dur, st.sent, float64(st.sent)/elapsed.Seconds(), skipped, st)
	t.Logf("load average (1 min) during the run: %s", la)
	t.Logf("Redis, sent TIME every 20 ms by the test process (not starved): %s", describePings(pl))
	t.Logf("instance: GOMAXPROCS=%d, busy loop %d iterations; CPU %v in %v (%.0f%% of one core); a 1 ms sleep overslept by up to %v, ≥50 ms %d times, ≥100 ms %d times",
		rep.GOMAXPROCS, rep.Spins, rep.CPU.Round(time.Millisecond), rep.Wall.Round(time.Millisecond),
		100*rep.CPU.Seconds()/rep.Wall.Seconds(), rep.Stall.Round(time.Millisecond), rep.Stalls50, rep.Stalls100)
	if rep.GOMAXPROCS != 1 {
		t.Errorf("the instance ran with GOMAXPROCS=%d, want 1", rep.GOMAXPROCS)
	}
	// The bounds hold for an instance short of CPU that still runs within
	// its per-decision deadline (100 ms). One that did not (the race
	// detector's cost with CPU hogs alongside: 26-38% of a core, stalls up
	// to 280 ms; or, beside the whole suite and six hogs, 22% of a core
	// with no stall of 100 ms but its Takes waiting about their deadline
	// for the CPU, a quarter of them past it) times out on its own, the
	// local fallback decides much of its traffic, and that is not exact:
	// its figures are logged, not judged (what Redis alone admitted always
	// is). It did not when it stood still 100 ms or more, or when it saw a
	// Take's deadline 50 ms or more after it passed.
	bound := t.Errorf
	if late := lateDeadlines(run, rep.Decisions); rep.Stalls100 > 0 || late > 0 {
		bound = func(format string, args ...any) {
			t.Logf("not judged, the instance did not run within its deadline (it stood still 100 ms or more %d times, and saw %d deadlines 50 ms or more late): "+format,
				append([]any{rep.Stalls100, late}, args...)...)
		}
	}
	judgeSoak(t, run, start, pl, rs, rep.Decisions, float64(st.sent)/elapsed.Seconds() >= soakRate/2, bound)
}

// startSoakInstance starts this test binary as the starved instance
// (runSoakInstance) with GOMAXPROCS=1, and returns its URL. It is stopped
// with SIGTERM at cleanup and must exit with status 0.
func startSoakInstance(t *testing.T, redisURL string) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	d := &demo{done: make(chan struct{})}
	d.cmd = exec.Command(exe)
	d.cmd.Env = append(os.Environ(), soakInstanceEnv+"="+redisURL, "GOMAXPROCS=1",
		"GORACE=atexit_sleep_ms=0 halt_on_error=1", "SLUICE_BREAKER_DEBUG="+os.Getenv("SLUICE_BREAKER_DEBUG"))
	d.cmd.Stderr = lockedWriter{d}
	setDeathSignal(d.cmd)
	stdout, err := d.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if u, ok := strings.CutPrefix(sc.Text(), "listening on "); ok {
				addr <- strings.TrimSpace(u)
			}
		}
	}()
	var waitErr error
	go func() {
		waitErr = d.cmd.Wait()
		close(d.done)
	}()
	t.Cleanup(func() {
		_ = d.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-d.done:
			if waitErr != nil {
				t.Errorf("soak instance: %v; its log:\n%s", waitErr, d.log())
			}
		case <-time.After(10 * time.Second):
			_ = d.cmd.Process.Kill()
			<-d.done
			t.Errorf("soak instance did not stop within 10 s of SIGTERM; its log:\n%s", d.log())
		}
	})
	select {
	case u := <-addr:
		return u
	case <-d.done:
		t.Fatalf("soak instance exited before listening: %v; its log:\n%s", waitErr, d.log())
	case <-time.After(30 * time.Second):
		t.Fatalf("soak instance did not listen within 30 s; its log:\n%s", d.log())
	}
	return ""
}

// soakReply is one request of the soak and its answer.
type soakReply struct {
	reply
	route, key string
}

// soakTarget returns the route and client key of request i: even requests
// go to /fw, odd ones to /gcra; half of each route's requests go to its hot
// keys, the others spread over all soakKeys.
func soakTarget(i int) (route string, key int) {
	h := splitmix(uint64(i))
	hot, n := h&1 == 0, uint64(soakKeys)
	route = "fw"
	if i%2 == 1 {
		route = "gcra"
	}
	if hot && route == "fw" {
		n = soakHotFW
	} else if hot {
		n = soakHotGCRA
	}
	return route, int((h >> 1) % n)
}

// splitmix is SplitMix64's finaliser: a fixed, well-spread hash.
func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// pacedLoad sends soakRate requests per second for d from soakWorkers
// workers, each due request handed to an idle worker; a request that
// finds every worker busy is not sent (counted in skipped), so that a
// slow instance gets the load it can take rather than a backlog.
func pacedLoad(hc *http.Client, url, run string, d time.Duration) (rs []soakReply, skipped int) {
	work := make(chan int)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range soakWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []soakReply
			for i := range work {
				route, key := soakTarget(i)
				k := run + "-" + strconv.Itoa(key)
				l := load{client: hc, urls: []string{url + "/" + route}, key: func(int) string { return k }}
				mine = append(mine, soakReply{reply: l.one(context.Background(), i), route: route, key: k})
			}
			mu.Lock()
			rs = append(rs, mine...)
			mu.Unlock()
		}()
	}
	start := time.Now()
	tick := time.NewTicker(5 * time.Millisecond)
	next := 0
	for now := range tick.C {
		el := now.Sub(start)
		if el >= d {
			break
		}
		for due := int(el.Seconds() * soakRate); next < due; next++ {
			select {
			case work <- next:
			default:
				skipped++
			}
		}
	}
	tick.Stop()
	close(work)
	wg.Wait()
	return rs, skipped
}

// sampleLoad samples the 1-minute load average every second until the
// function it returns is called, which describes the samples.
func sampleLoad() func() string {
	stop, done := make(chan struct{}), make(chan string)
	go func() {
		var s []float64
		read := func() {
			b, err := os.ReadFile("/proc/loadavg")
			if f := strings.Fields(string(b)); err == nil && len(f) > 0 {
				if v, err := strconv.ParseFloat(f[0], 64); err == nil {
					s = append(s, v)
				}
			}
		}
		read()
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				read()
				continue
			case <-stop:
			}
			read()
			if len(s) == 0 {
				done <- "unknown (no /proc/loadavg)"
				return
			}
			sum := 0.0
			for _, v := range s {
				sum += v
			}
			done <- fmt.Sprintf("%.2f at the start, %.2f at the end, %.2f–%.2f (mean %.2f over %d samples)",
				s[0], s[len(s)-1], slices.Min(s), slices.Max(s), sum/float64(len(s)), len(s))
			return
		}
	}()
	return func() string {
		close(stop)
		return <-done
	}
}

// ping is one TIME call of pingRedis: when it was sent (Unix µs), its
// round trip (-1: failed), and how long after it was sent Redis ran it
// (Redis' clock, the machine's): the part of the round trip that is
// Redis' (and the kernel's), not the caller's.
type ping struct {
	at         int64
	rtt, redis time.Duration
}

// pingRedis sends TIME to Redis every 20 ms until the function it returns
// is called, which returns the calls: how healthy Redis was.
func pingRedis(rdb *redis.Client) func() []ping {
	stop, done := make(chan struct{}), make(chan []ping)
	go func() {
		var ps []ping
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-t.C:
			case <-stop:
				done <- ps
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			before := time.Now()
			p := ping{at: before.UnixMicro(), rtt: -1}
			if at, err := rdb.Time(ctx).Result(); err == nil {
				p.rtt, p.redis = time.Since(before), max(0, at.Sub(before))
			}
			ps = append(ps, p)
			cancel()
		}
	}()
	return func() []ping {
		close(stop)
		return <-done
	}
}

// describePings summarises the calls of pingRedis.
func describePings(ps []ping) string {
	rtt, redis, failed := stats{}, stats{}, 0
	for _, p := range ps {
		if p.rtt < 0 {
			failed++
			continue
		}
		rtt.lat, redis.lat = append(rtt.lat, p.rtt), append(redis.lat, p.redis)
	}
	slices.Sort(rtt.lat)
	slices.Sort(redis.lat)
	r := func(d time.Duration) time.Duration { return d.Round(10 * time.Microsecond) }
	return fmt.Sprintf("%d calls, %d failed; round trip p50 %v p99 %v max %v; sent to run by Redis p50 %v p99 %v max %v", len(ps), failed,
		r(rtt.pct(0.5)), r(rtt.pct(0.99)), r(rtt.max()), r(redis.pct(0.5)), r(redis.pct(0.99)), r(redis.max()))
}

// slowestPing returns the longest round trip and the longest wait for
// Redis of the calls sent within [from, to] (Unix µs), and how many there
// were; a failed one counts as an hour.
func slowestPing(ps []ping, from, to int64) (rtt, redis time.Duration, n int) {
	for _, p := range ps {
		if p.at >= from && p.at <= to {
			n++
			if p.rtt < 0 {
				p.rtt, p.redis = time.Hour, time.Hour
			}
			rtt, redis = max(rtt, p.rtt), max(redis, p.redis)
		}
	}
	return rtt, redis, n
}

// fetchSoakReport asks the instance for its decisions.
func fetchSoakReport(t *testing.T, url string) soakReport {
	t.Helper()
	resp, err := http.Get(url + "/report")
	if err != nil {
		t.Fatalf("GET /report: %v", err)
	}
	defer resp.Body.Close()
	var rep soakReport
	if err := json.NewDecoder(resp.Body).Decode(&rep); err != nil {
		t.Fatalf("GET /report: %v", err)
	}
	return rep
}

// lateDeadlines counts the Takes of run's keys that ran out of time and
// were seen so 50 ms or more after their deadline: the instance stood
// still past it.
func lateDeadlines(run string, ds []soakDecision) int {
	late := 0
	for _, d := range ds {
		if strings.HasPrefix(d.Key, run+"-") && d.Err == "deadline" && time.Duration(d.TakeMicro)*time.Microsecond >= defaultTimeout+50*time.Millisecond {
			late++
		}
	}
	return late
}

// judgeSoak checks the decisions of run's keys and reports their figures.
// A run that achieved less than half the aimed rate is not held to
// reaching the limits (power false).
func judgeSoak(t *testing.T, run string, start time.Time, pl []ping, rs []soakReply, ds []soakDecision, power bool, bound func(string, ...any)) {
	t.Helper()
	outcomes, errs := map[string]int{}, map[string]int{}
	served := map[string][]soakDecision{} // route -> admissions
	var lat []time.Duration
	for _, d := range ds {
		if !strings.HasPrefix(d.Key, run+"-") {
			continue
		}
		outcomes[d.Route+" "+d.Outcome]++
		if d.Err != "" {
			errs[d.Err]++
		}
		if d.Served {
			served[d.Route] = append(served[d.Route], d)
		}
		lat = append(lat, time.Duration(d.TakeMicro)*time.Microsecond)
	}
	slices.Sort(lat)
	pct := func(p float64) time.Duration {
		if len(lat) == 0 {
			return 0
		}
		return lat[int(p*float64(len(lat)-1))]
	}
	t.Logf("decisions: %v; store errors: %v (of the deadlines, %d seen by the instance 50 ms or more after they passed); time in the stores p50 %v p99 %v max %v",
		outcomes, errs, lateDeadlines(run, ds), pct(0.5), pct(0.99), pct(1))
	if n := errs["breaker-open"]; n != 0 {
		bound("%d decisions met an open breaker on a healthy Redis, %s", n, breakerSpells(ds, start, pl))
	}
	if n := outcomes["fw "+core.OutcomeFallback.String()] + outcomes["gcra "+core.OutcomeFallback.String()]; n != 0 {
		t.Logf("%d decisions were made by the local fallback (a Take ran out of time)", n)
	}
	got := map[string]int{}
	for _, r := range rs {
		if r.status == http.StatusOK {
			got[r.route]++
		}
	}
	for _, route := range []string{"fw", "gcra"} {
		if len(served[route]) < got[route] {
			t.Errorf("/%s: clients got %d×200, the instance admitted %d", route, got[route], len(served[route]))
		}
	}
	checkFixedWindows(t, served["fw"], power, bound)
	checkGCRA(t, served["gcra"], power, bound)
}

// breakerSpells describes when decisions met an open breaker: the spells
// (decisions less than two cooldowns apart) as seconds since start, and
// how slow the test process' TIME calls to Redis were in the second
// before each.
func breakerSpells(ds []soakDecision, start time.Time, pl []ping) string {
	var at []int64
	for _, d := range ds {
		if d.Err == "breaker-open" {
			at = append(at, d.Lo)
		}
	}
	slices.Sort(at)
	var spells []string
	for i := 0; i < len(at); {
		j := i
		for j+1 < len(at) && at[j+1]-at[j] < 2e6 {
			j++
		}
		rtt, redis, n := slowestPing(pl, at[i]-1e6, at[i])
		spells = append(spells, fmt.Sprintf("%.1f–%.1f s (%d decisions; the test's %d TIME calls in the second before: round trip up to %v, Redis ran them up to %v after they were sent)",
			float64(at[i]-start.UnixMicro())/1e6, float64(at[j]-start.UnixMicro())/1e6, j-i+1, n,
			rtt.Round(10*time.Microsecond), redis.Round(10*time.Microsecond)))
		i = j + 1
	}
	return "in " + strconv.Itoa(len(spells)) + " spells after the load started: " + strings.Join(spells, ", ")
}

// checkFixedWindows places each admission of /fw in its window and fails t
// when a key's window admitted more than the limit. An admission's window
// ends at now + Result.ResetAfter, a multiple of the period, where now,
// the deciding store's clock, lies within [Lo, Hi]: the window is the one
// whose end lies within [Lo, Hi] + ResetAfter, and an admission for which
// none does, or whose ResetAfter is not within (0, period], is an error.
func checkFixedWindows(t *testing.T, adm []soakDecision, power bool, bound func(string, ...any)) {
	t.Helper()
	p, limit := soakFixed.Period.Microseconds(), int(soakFixed.Rate)
	count := map[string][]soakDecision{} // "key@window"
	for _, d := range adm {
		end := (d.Lo + d.Reset + p - 1) / p * p
		if d.Lo <= 0 || d.Hi < d.Lo || d.Reset <= 0 || d.Reset > p || end > d.Hi+d.Reset {
			t.Errorf("/fw admission %+v: no window of %v ends within its decision's bounds plus its reset", d, soakFixed.Period)
			continue
		}
		w := d.Key + "@" + strconv.FormatInt(end/p-1, 10)
		count[w] = append(count[w], d)
	}
	most, full, over, redisMost := 0, 0, 0, 0
	for w, ds := range count {
		most = max(most, len(ds))
		redisMost = max(redisMost, len(ds)-outcomeCounts(ds)[core.OutcomeFallback.String()])
		if len(ds) >= limit {
			full++
		}
		if len(ds) > limit {
			over++
			judge := bound
			if len(ds) == limit+1 && outcomeCounts(ds)[core.OutcomeFallback.String()] > 0 {
				judge = lostReply(t)
			}
			if over <= 10 {
				judge("/fw %s: %d admitted, limit %d; outcomes %v", w, len(ds), limit, outcomeCounts(ds))
			}
		}
	}
	t.Logf("/fw (%v): %d admissions in %d key windows; at most %d in one (limit %d), %d of them decided by Redis; %d windows at the limit, %d over",
		soakFixed, len(adm), len(count), most, limit, redisMost, full, over)
	if redisMost > limit {
		t.Errorf("/fw: Redis alone admitted %d in one key window, limit %d", redisMost, limit)
	}
	if full == 0 && power {
		bound("/fw: no key window reached its limit: the soak tested nothing")
	}
}

// checkGCRA fails t when a key's admissions on /gcra exceed GCRA's bound:
// every admission leaves the key's TAT at most burst·T ahead of the
// store's clock and moves it at least T, so in any span of time [a, b]
// at most burst + floor((b-a)/T) are admitted. Admissions count in a span
// only when their bounds [Lo, Hi] lie within it, so the check never
// blames the store for timing it cannot see. It reports how close the
// keys came (0: a span held exactly the bound) and the most admitted in a
// 30 s period starting on the epoch.
func checkGCRA(t *testing.T, adm []soakDecision, power bool, bound func(string, ...any)) {
	t.Helper()
	spec, err := soakGCRA.Spec()
	if err != nil {
		t.Fatal(err)
	}
	burst, interval := spec.Burst(), spec.Interval()
	perKey := map[string][]soakDecision{}
	for _, d := range adm {
		perKey[d.Key] = append(perKey[d.Key], d)
	}
	closest, redisClosest, bucket, refused := int64(-1<<62), int64(-1<<62), 0, 0
	for key, ds := range perKey {
		excess, at := gcraExcess(ds, burst, interval)
		closest = max(closest, excess)
		fromRedis := slices.DeleteFunc(slices.Clone(ds), func(d soakDecision) bool { return d.Outcome == core.OutcomeFallback.String() })
		if e, _ := gcraExcess(fromRedis, burst, interval); len(fromRedis) > 0 {
			redisClosest = max(redisClosest, e)
		}
		if excess > 0 {
			refused++
			judge := bound
			if excess == 1 && len(fromRedis) < len(ds) {
				judge = lostReply(t)
			}
			if refused <= 10 {
				judge("/gcra key %s: %d more admitted than the bound within [%d, %d] µs; outcomes %v",
					key, excess, at[0], at[1], outcomeCounts(ds))
			}
		}
		per := map[int64]int{}
		for _, d := range ds {
			if b := d.Lo / 30e6; b == d.Hi/30e6 {
				per[b]++
				bucket = max(bucket, per[b])
			}
		}
	}
	t.Logf("/gcra (%v, emission interval %v): %d admissions over %d keys; closest to the bound: %d (over it: %d keys; Redis' admissions alone: %d); at most %d admitted in a 30 s period",
		soakGCRA, time.Duration(interval)*time.Microsecond, len(adm), len(perKey), closest, refused, redisClosest, bucket)
	if redisClosest > 0 {
		t.Errorf("/gcra: Redis alone admitted %d more than the bound for a key", redisClosest)
	}
	if closest < -2 && power {
		bound("/gcra: no key came within 2 of its bound (closest %d): the soak tested nothing", closest)
	}
}

// lostReply returns how a key over its bound by one, with decisions of
// the local fallback among its admissions, is reported: logged, as the
// bound ALGORITHMS.md gives allows it. A call whose reply was lost
// before its server recorded charges ("Calls whose reply was lost": the
// first one, unless a slow answer had started the recording) cannot be
// told apart from one that ran: it is taken as having run, and goes
// uncharged if it had not.
func lostReply(t *testing.T) func(string, ...any) {
	return func(format string, args ...any) {
		t.Logf("within the documented bound (a lost reply's call taken as run may go uncharged): "+format, args...)
	}
}

// gcraExcess returns the most by which the admissions ds of one key exceed
// burst + floor(span/interval) in any span [Lo_i, Hi_j], and that span.
func gcraExcess(ds []soakDecision, burst, interval int64) (int64, [2]int64) {
	slices.SortFunc(ds, func(a, b soakDecision) int { return int(a.Lo - b.Lo) })
	worst, at := int64(-1<<62), [2]int64{}
	var his []int64 // Hi of ds[i:], sorted
	for i := len(ds) - 1; i >= 0; i-- {
		j, _ := slices.BinarySearch(his, ds[i].Hi)
		his = slices.Insert(his, j, ds[i].Hi)
		for n, hi := range his {
			if e := int64(n+1) - burst - (hi-ds[i].Lo)/interval; e > worst {
				worst, at = e, [2]int64{ds[i].Lo, hi}
			}
		}
	}
	return worst, at
}

// outcomeCounts counts decisions by outcome.
func outcomeCounts(ds []soakDecision) map[string]int {
	m := map[string]int{}
	for _, d := range ds {
		m[d.Outcome]++
	}
	return m
}
