package redisstore_test

import (
	"context"
	"errors"
	"io"
	"net"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/internal/redistest"
)

// slowProxy listens on 127.0.0.1 and forwards every connection to addr,
// holding each chunk of the server's replies for delay before passing it
// on (in order): a healthy Redis with delay more of round trip. It stops
// at t.Cleanup.
func slowProxy(t *testing.T, addr string, delay time.Duration) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		conns []net.Conn
		wg    sync.WaitGroup
	)
	track := func(c net.Conn) {
		mu.Lock()
		conns = append(conns, c)
		mu.Unlock()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", addr)
			if err != nil {
				_ = c.Close()
				continue
			}
			track(c)
			track(up)
			wg.Add(2)
			go func() { defer wg.Done(); _, _ = io.Copy(up, c); _ = up.Close() }()
			go func() { defer wg.Done(); delayCopy(c, up, delay) }()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

// delayCopy copies from src to dst, each chunk delay after it was read.
func delayCopy(dst, src net.Conn, delay time.Duration) {
	type chunk struct {
		at time.Time
		b  []byte
	}
	chunks := make(chan chunk, 4096)
	go func() {
		defer close(chunks)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				chunks <- chunk{time.Now(), buf[:n]}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range chunks {
		time.Sleep(time.Until(c.at.Add(delay))) // the proxy's latency
		if _, err := dst.Write(c.b); err != nil {
			break
		}
	}
	_ = dst.Close()
	_ = src.Close()
	for range chunks {
	}
}

// takeTally counts the outcomes of Takes by kind (errKind).
type takeTally struct {
	mu     sync.Mutex
	counts map[string]int
	last   map[string]error
}

func (tt *takeTally) add(err error) {
	tt.mu.Lock()
	defer tt.mu.Unlock()
	if tt.counts == nil {
		tt.counts, tt.last = map[string]int{}, map[string]error{}
	}
	tt.counts[errKind(err)]++
	tt.last[errKind(err)] = err
}

func (tt *takeTally) get(kind string) int {
	tt.mu.Lock()
	defer tt.mu.Unlock()
	return tt.counts[kind]
}

// hammer runs workers goroutines taking fresh keys of st with a timeout
// each until d has passed, and returns their outcomes and the longest
// time this process did not run a goroutine that wakes every millisecond
// (a stall of the whole process, which the breaker cannot tell from a
// frozen server). The workers first take once each with a roomy deadline,
// so that the client's connections are made.
func hammer(t *testing.T, st *redisstore.Store, srv string, workers int, timeout, d time.Duration) (*takeTally, time.Duration) {
	t.Helper()
	return hammerInto(t, &takeTally{}, st, srv, workers, timeout, d)
}

// hammerInto is hammer counting into tt, which the caller may watch.
func hammerInto(t *testing.T, tt *takeTally, st *redisstore.Store, srv string, workers int, timeout, d time.Duration) (*takeTally, time.Duration) {
	t.Helper()
	var wg sync.WaitGroup
	var seq atomic.Int64
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if _, err := st.Take(ctx, "warm-up", 1, specs(perMinute10)...); err != nil {
				t.Errorf("warm-up: %v", err)
			}
		}()
	}
	wg.Wait()
	stalled, slow := watchStalls(), watchServer(t, srv)
	end := time.Now().Add(d)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) {
				ctx, cancel := context.WithTimeout(context.Background(), timeout)
				_, err := st.Take(ctx, "k-"+strconv.FormatInt(seq.Add(1), 10), 1, specs(perMinute10)...)
				cancel()
				tt.add(err)
				if errors.Is(err, store.ErrBreakerOpen) {
					return
				}
			}
		}()
	}
	wg.Wait()
	return tt, max(stalled(), slow())
}

// watchStalls starts a goroutine that sleeps a millisecond at a time; the
// function it returns stops it and returns the longest it overslept.
func watchStalls() func() time.Duration {
	stop, done := make(chan struct{}), make(chan time.Duration)
	go func() {
		var worst time.Duration
		for {
			before := time.Now()
			select {
			case <-stop:
				done <- worst
				return
			case <-time.After(time.Millisecond):
			}
			worst = max(worst, time.Since(before)-time.Millisecond)
		}
	}()
	return func() time.Duration {
		close(stop)
		return <-done
	}
}

// watchServer starts a goroutine that sends PING to the redis-server at
// addr every 5 ms on a connection of its own; the function it returns
// stops it and returns the slowest round trip: how long Redis itself (a
// process the machine's load starves too) stood still.
func watchServer(t *testing.T, addr string) func() time.Duration {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, PoolSize: 1})
	stop, done := make(chan struct{}), make(chan time.Duration)
	go func() {
		defer c.Close()
		var worst time.Duration
		for {
			select {
			case <-stop:
				done <- worst
				return
			case <-time.After(5 * time.Millisecond):
			}
			start := time.Now()
			if err := c.Ping(context.Background()).Err(); err != nil {
				t.Errorf("PING to %s: %v", addr, err)
			}
			worst = max(worst, time.Since(start))
		}
	}()
	return func() time.Duration {
		close(stop)
		return <-done
	}
}

// judgeHealthy runs attempt (a fresh store each time) until the process
// and Redis ran on time throughout (neither stalled for half the deadline), at most
// three times, and fails t when the breaker opened in such a run.
func judgeHealthy(t *testing.T, what string, timeout time.Duration, attempt func() (*takeTally, time.Duration)) {
	t.Helper()
	for i := 1; i <= 3; i++ {
		tt, stalled := attempt()
		t.Logf("%s, attempt %d: %v; this process or Redis stalled for up to %v", what, i, tt.snapshot(), stalled.Round(time.Millisecond))
		if stalled >= timeout/2 {
			t.Logf("the process or Redis stalled for %v, which the breaker cannot tell from a frozen server: trying again", stalled.Round(time.Millisecond))
			time.Sleep(time.Second) // a moment for the machine to calm down
			continue
		}
		if tt.get("none") == 0 {
			t.Fatalf("no Take was answered")
		}
		if n := tt.get("breaker"); n != 0 {
			t.Errorf("the breaker opened on a healthy Redis (%d Takes met it open)", n)
		}
		return
	}
	t.Logf("the machine was too busy to judge in three attempts")
}

func (tt *takeTally) snapshot() map[string]any {
	tt.mu.Lock()
	defer tt.mu.Unlock()
	out := map[string]any{}
	for k, v := range tt.counts {
		out[k] = v
		if k != "none" && k != "timeout" {
			out["last "+k] = tt.last[k]
		}
	}
	return out
}

// Calls that time out on a healthy Redis, one here and there, do not open
// the breaker: deadlines shorter than a round trip among calls that are
// answered; a queue in the Store (8 workers, 30 ms round trips, a 100 ms
// deadline); and a client starved of CPU (GOMAXPROCS=1 and a goroutine
// spinning).
func TestBreakerIgnoresSlowCalls(t *testing.T) {
	redistest.Slow(t)
	t.Run("deadline shorter than a round trip", func(t *testing.T) {
		srv := redistest.StartServer(t)
		st := realStore(t, slowProxy(t, srv.Addr, 20*time.Millisecond))
		done := make(chan *takeTally)
		workers := &takeTally{}
		go func() {
			tt, _ := hammerInto(t, workers, st, srv.Addr, 4, 2*time.Second, 2*time.Second)
			done <- tt
		}()
		// The short Takes are made among calls that are answered.
		if !redistest.WaitUntil(10*time.Second, func() bool { return workers.get("none") >= 4 }) {
			t.Fatalf("the workers were not answered within 10 s: %v", workers.snapshot())
		}
		short := &takeTally{}
		for i := 0; i < 40; i++ {
			time.Sleep(10 * time.Millisecond) // about one answer to the workers apart
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Millisecond)
			_, err := st.Take(ctx, "short", 1, specs(perMinute10)...)
			cancel()
			short.add(err)
			if errors.Is(err, store.ErrBreakerOpen) {
				t.Fatalf("a Take with a 2 ms deadline met an open breaker after %v", short.snapshot())
			}
		}
		normal := <-done
		t.Logf("Takes with a 2 ms deadline (20 ms round trips): %v; alongside, 4 workers with a 2 s deadline: %v", short.snapshot(), normal.snapshot())
		if short.get("timeout") == 0 {
			t.Errorf("no Take with a 2 ms deadline timed out: the test proves nothing")
		}
		if n := normal.get("breaker"); n != 0 {
			t.Errorf("%d Takes alongside met an open breaker", n)
		}
		wantState(t, st, "short", "closed")
	})
	t.Run("8 workers on 30ms round trips", func(t *testing.T) {
		// A queued Take waits up to one round trip for a slot, then one
		// round trip on the wire: 60 of its 100 ms; a new connection costs
		// two or three round trips. Some run out of time on a loaded
		// machine.
		srv := redistest.StartServer(t)
		proxy := slowProxy(t, srv.Addr, 30*time.Millisecond)
		judgeHealthy(t, "8 workers, 100 ms deadline, 30 ms round trips for 3 s", 100*time.Millisecond, func() (*takeTally, time.Duration) {
			return hammer(t, realStore(t, proxy), srv.Addr, 8, 100*time.Millisecond, 3*time.Second)
		})
	})
	t.Run("client starved of CPU", func(t *testing.T) {
		srv := redistest.StartServer(t)
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
		var spin atomic.Bool
		spin.Store(true)
		defer spin.Store(false)
		go func() {
			for spin.Load() {
			}
		}()
		judgeHealthy(t, "GOMAXPROCS=1 with a goroutine spinning, 8 workers, 100 ms deadline for 3 s", redisstore.DefaultTimeout, func() (*takeTally, time.Duration) {
			return hammer(t, realStore(t, srv.Addr), srv.Addr, 8, redisstore.DefaultTimeout, 3*time.Second)
		})
	})
}

// Takes whose deadline runs out in the Store's queue never reach Redis and
// do not count against it, even with a threshold of one failure: a slow
// call holds the only slot while 20 queued Takes expire. (A run in which
// the queued Takes were sent after all, the machine having stalled until
// the slow call returned, is tried again.)
func TestBreakerIgnoresCallsExpiredInQueue(t *testing.T) {
	redistest.Slow(t)
	srv := redistest.StartServer(t)
	proxy := slowProxy(t, srv.Addr, time.Second)
	for attempt := 1; ; attempt++ {
		st := realStore(t, proxy, redisstore.WithPipelining(1), redisstore.WithBreaker(1, time.Hour))
		if err := take(st, "warm-up"); err != nil {
			t.Fatal(err)
		}
		slow := make(chan error, 1)
		go func() { slow <- take(st, "slow") }() // no deadline: holds the slot ~1 s
		redisstore.WaitPipeBusy(t, st, 1)
		var wg sync.WaitGroup
		expired := &takeTally{}
		for i := 0; i < 20; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
				defer cancel()
				_, err := st.Take(ctx, "queued-"+strconv.Itoa(i), 1, specs(perMinute10)...)
				expired.add(err)
			}()
		}
		wg.Wait()
		if err := <-slow; err != nil {
			t.Fatalf("the slow Take: %v", err)
		}
		pipelined, _ := redisstore.PipeStats(st)
		t.Logf("attempt %d: 20 Takes with a 30 ms deadline behind a 1 s round trip: %v; %d of them sent", attempt, expired.snapshot(), pipelined)
		if expired.get("timeout") != 20 {
			t.Fatalf("queued Takes: %v, want 20 timeouts", expired.snapshot())
		}
		if pipelined != 0 && attempt < 3 {
			continue
		}
		if pipelined == 20 {
			t.Logf("every queued Take was sent in three attempts: the machine was too busy to judge")
			return
		}
		wantState(t, st, "a", "closed")
		return
	}
}

// takeRecord is one Take of TestBreakerRecoversAfterPause.
type takeRecord struct {
	start, end time.Time
	kind       string // errKind
}

// A CLIENT PAUSE longer than the deadline opens the breaker; Redis decides
// again within about one cooldown of the pause's end, and once the breaker
// has opened no Take waits out its deadline again while the pause lasts: a
// probe that Redis answers PING but holds the script of (PAUSE WRITE) does
// not make Takes wait for it.
func TestBreakerRecoversAfterPause(t *testing.T) {
	redistest.Slow(t)
	const (
		pause   = 2 * time.Second
		timeout = redisstore.DefaultTimeout
		slack   = time.Second // for a loaded machine
	)
	for _, mode := range []string{"WRITE", "ALL"} {
		t.Run(mode, func(t *testing.T) {
			srv := redistest.StartServer(t)
			st := realStore(t, srv.Addr) // the default breaker: 5 failures, 1 s cooldown
			admin := srv.Client(t)
			var (
				mu   sync.Mutex
				recs []takeRecord
				wg   sync.WaitGroup
				seq  atomic.Int64
			)
			stop := make(chan struct{})
			for range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						select {
						case <-stop:
							return
						default:
						}
						ctx, cancel := context.WithTimeout(context.Background(), timeout)
						r := takeRecord{start: time.Now()}
						_, err := st.Take(ctx, "p-"+strconv.FormatInt(seq.Add(1), 10), 1, specs(perMinute10)...)
						cancel()
						r.end, r.kind = time.Now(), errKind(err)
						mu.Lock()
						recs = append(recs, r)
						mu.Unlock()
						if err != nil {
							time.Sleep(time.Millisecond) // an open breaker answers at once
						}
					}
				}()
			}
			// The pause meets Takes that Redis answers (connected, the
			// script loaded).
			if !redistest.WaitUntil(10*time.Second, func() bool {
				mu.Lock()
				defer mu.Unlock()
				n := 0
				for _, r := range recs {
					if r.kind == "none" {
						n++
					}
				}
				return n >= 4
			}) {
				close(stop)
				wg.Wait()
				t.Fatal("no 4 Takes answered within 10 s")
			}
			if err := admin.Do(context.Background(), "client", "pause", pause.Milliseconds(), mode).Err(); err != nil {
				t.Fatal(err)
			}
			end := time.Now().Add(pause) // the pause ends at most this late
			// Takes through the pause and as long after.
			time.Sleep(time.Until(end.Add(pause)))
			close(stop)
			wg.Wait()
			judgePause(t, recs, end, timeout, DefaultCooldown+slack)
		})
	}
}

// DefaultCooldown is redisstore.DefaultBreakerCooldown.
const DefaultCooldown = redisstore.DefaultBreakerCooldown

// judgePause checks TestBreakerRecoversAfterPause's records against a
// pause that ended by end.
func judgePause(t *testing.T, recs []takeRecord, end time.Time, timeout, within time.Duration) {
	t.Helper()
	var opened, back time.Time
	var maxWait time.Duration
	second := 0 // Takes made after the breaker opened, during the pause, that timed out
	for _, r := range recs {
		maxWait = max(maxWait, r.end.Sub(r.start))
		if r.kind == "breaker" && (opened.IsZero() || r.end.Before(opened)) {
			opened = r.end
		}
		if r.kind == "none" && r.end.After(end) && (back.IsZero() || r.end.Before(back)) {
			back = r.end
		}
	}
	for _, r := range recs {
		if !opened.IsZero() && r.start.After(opened) && r.end.Before(end) && r.kind == "timeout" {
			second++
		}
	}
	counts := map[string]int{}
	for _, r := range recs {
		counts[r.kind]++
	}
	t.Logf("%d Takes %v; breaker opened %v before the pause's end; Redis decided again %v after it; slowest Take %v",
		len(recs), counts, end.Sub(opened).Round(time.Millisecond), back.Sub(end).Round(time.Millisecond), maxWait.Round(time.Millisecond))
	switch {
	case opened.IsZero():
		t.Fatalf("the breaker never opened during the pause")
	case back.IsZero():
		t.Fatalf("no Take was decided by Redis after the pause ended")
	}
	if back.Sub(end) > within {
		t.Errorf("Redis decided again %v after the pause ended, want within %v", back.Sub(end), within)
	}
	if second != 0 {
		t.Errorf("%d Takes made after the breaker opened timed out before the pause ended: a second stall", second)
	}
}
