package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/internal/deadline"
	"github.com/sluicehq/sluice/internal/redistest"
)

// flood runs goroutines × per Takes of cost 1 on keys key0..key(keys-1)
// against limit l and returns how many each key admitted. flush, when set,
// runs every 4 Takes of goroutine 0.
func flood(t *testing.T, s *Store, prefix string, keys, goroutines, per int, l store.Limit, flush func()) []int64 {
	t.Helper()
	admitted := make([]atomic.Int64, keys)
	var wg sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < per; i++ {
				k := (g + i) % keys
				r, err := s.Take(context.Background(), prefix+strconv.Itoa(k), 1, specs(l)...)
				if err != nil {
					t.Errorf("take: %v", err)
					return
				}
				if r.Allowed {
					admitted[k].Add(1)
				}
				if flush != nil && g == 0 && i%4 == 2 {
					flush()
				}
			}
		}(g)
	}
	wg.Wait()
	out := make([]int64, keys)
	for i := range admitted {
		out[i] = admitted[i].Load()
	}
	return out
}

// checkExact floods limits with pipelining off, on with one request in
// flight and on with four, the deny cache off so that every Take reaches
// Redis: each key admits exactly its limit. It returns how many pipelined
// Takes met NOSCRIPT and were sent again.
func checkExact(t *testing.T, client redis.UniversalClient, flush func()) (resent int64) {
	t.Helper()
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	for _, l := range []store.Limit{
		{Algorithm: store.GCRA, Rate: 50, Period: time.Hour},
		{Algorithm: store.SlidingLog, Rate: 50, Period: time.Hour},
		{Algorithm: store.FixedWindow, Rate: 50, Period: time.Hour},
	} {
		for _, inFlight := range []int{0, 1, 4} {
			s, err := New(client, append(bare(), WithPipelining(inFlight), WithDenyCache(0))...)
			if err != nil {
				t.Fatal(err)
			}
			prefix := fmt.Sprintf("pipe:%s:%s:%d:", run, mustID(t, l), inFlight)
			got := flood(t, s, prefix, 8, 48, 20, l, flush) // 120 Takes per key
			for k, n := range got {
				if n != 50 {
					t.Errorf("%v, pipelining %d: key %d admitted %d of 120, want 50", l, inFlight, k, n)
				}
			}
			if inFlight > 0 {
				pipelined, n := pipeStats(s)
				if pipelined == 0 {
					t.Errorf("%v, pipelining %d: no Take was pipelined", l, inFlight)
				}
				resent += n
			}
		}
	}
	return resent
}

func TestRedisPipelineExact(t *testing.T) {
	t.Parallel()
	checkExact(t, sharedClient(t), nil)
}

func TestClusterPipelineExact(t *testing.T) {
	t.Parallel()
	cluster := redistest.SharedCluster(t)
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs, MaxRetries: -1})
	t.Cleanup(func() { _ = client.Close() })
	checkExact(t, client, nil)
}

// SCRIPT FLUSH during a flood: Takes that meet NOSCRIPT in a pipeline are
// sent again as EVAL, none fails and none is charged twice.
func TestRedisPipelineNoScript(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	t.Cleanup(func() { _ = client.Close() })
	resent := checkExact(t, client, func() {
		if err := client.ScriptFlush(context.Background()).Err(); err != nil {
			t.Error(err)
		}
	})
	if resent == 0 {
		t.Error("no pipelined Take met NOSCRIPT")
	}
}

func TestClusterPipelineNoScript(t *testing.T) {
	redistest.Slow(t)
	t.Parallel()
	cluster := redistest.StartCluster(t, 3, 0)
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs, MaxRetries: -1})
	t.Cleanup(func() { _ = client.Close() })
	resent := checkExact(t, client, func() {
		err := client.ForEachMaster(context.Background(), func(ctx context.Context, node *redis.Client) error {
			return node.ScriptFlush(ctx).Err()
		})
		if err != nil {
			t.Error(err)
		}
	})
	if resent == 0 {
		t.Error("no pipelined Take met NOSCRIPT")
	}
}

// A queued Take whose context ends returns at once and is never sent.
func TestRedisPipelineCanceled(t *testing.T) {
	srv := redistest.StartServer(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	t.Cleanup(func() { _ = client.Close() })
	// The breaker off: the timeout below would open it, and the test
	// reads the state afterwards.
	s, err := New(client, append(bare(), WithPipelining(1), WithBreaker(0, 0))...)
	if err != nil {
		t.Fatal(err)
	}
	l := store.Limit{Algorithm: store.FixedWindow, Rate: 100, Period: time.Hour}
	takeOK(t, s, "warm", 1, l) // loads the script

	srv.Freeze(t)
	first := make(chan error, 1)
	go func() {
		_, err := s.Take(context.Background(), "c", 1, specs(l)...) // holds the only slot
		first <- err
	}()
	for i := 0; ; i++ {
		pipe := s.health.whole.pipe
		pipe.mu.Lock()
		busy := pipe.busy
		pipe.mu.Unlock()
		if busy == 1 {
			break
		}
		if i > 1000 {
			t.Fatal("first Take never started")
		}
		time.Sleep(time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = s.Take(ctx, "c", 1, specs(l)...)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("queued Take: %v, want context.DeadlineExceeded", err)
	}
	if waited := time.Since(start); waited > 2*time.Second {
		t.Errorf("queued Take returned after %v", waited)
	}
	srv.Thaw(t)
	if err := <-first; err != nil {
		t.Fatalf("first Take: %v", err)
	}
	// Only the first Take was charged.
	if r := takeOK(t, s, "c", 0, l); r.Remaining != 99 && r.Remaining != 100 { // 100 if the hour turned
		t.Errorf("after the canceled Take: %+v, want Remaining 99", r)
	}
	if n, _ := pipeStats(s); n != 0 {
		t.Errorf("%d Takes pipelined, want 0 (the canceled one is dropped)", n)
	}
}

// A queued Take whose deadline passed before its pipeline was taken, and
// before the batcher's timer woke it (expire), is woken by take, which
// drops it: it returns at once, never sent, and does not wait for its
// parent context (here none ends) as it did when take only marked it
// abandoned (CI of dae4ea6: requests held 30 s during a Redis pause).
func TestPipelineTakeWakesExpired(t *testing.T) {
	b := &batcher{max: 1, busy: 1} // the one slot is in use: calls queue
	ctx := deadline.New(context.Background(), 20*time.Millisecond)
	defer ctx.Cancel()
	type result struct {
		sent int64
		err  error
	}
	out := make(chan result, 1)
	go func() {
		_, sent, err := b.do(ctx, fixedScript, []any{"eval", "return 1", 0})
		out <- result{sent, err}
	}()
	for queued := false; !queued; time.Sleep(time.Millisecond) {
		b.mu.Lock()
		if queued = len(b.queue) == 1; queued {
			b.timer.Stop() // expire does not run: take alone must wake it
		}
		b.mu.Unlock()
	}
	d, _ := ctx.Deadline()
	redistest.WaitUntil(time.Until(d)+time.Second, func() bool { return time.Now().After(d) })
	b.mu.Lock()
	live := b.take()
	b.mu.Unlock()
	if len(live) != 0 {
		t.Errorf("take sent %d calls past their deadline", len(live))
	}
	select {
	case r := <-out:
		if !errors.Is(r.err, context.DeadlineExceeded) || r.sent != notSent {
			t.Errorf("got %v, sent %d; want context.DeadlineExceeded, never sent", r.err, r.sent)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the Take still waits 10 s after take dropped it")
	}
}

// A Take whose context starts no timer (package deadline, as the Store's
// WithTimeout makes it) returns at its deadline all the same: queued,
// never sent; sent in a pipeline that Redis does not answer, at once.
func TestPipelineDeadlineWithoutTimer(t *testing.T) {
	srv := redistest.StartServer(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, ReadTimeout: 10 * time.Second})
	t.Cleanup(func() { _ = client.Close() })
	b := &batcher{client: client, scripts: &runner{client: client}, max: 1}
	if err := client.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	srv.Freeze(t)
	b.busy = 1 // the one slot is in use: calls queue
	do := func(d time.Duration) (sent int64, waited time.Duration, err error) {
		ctx := deadline.New(context.Background(), d)
		defer ctx.Cancel()
		start := time.Now()
		_, sent, err = b.do(ctx, fixedScript, []any{"eval", "return 1", 0})
		return sent, time.Since(start), err
	}
	sent, waited, err := do(50 * time.Millisecond)
	if !errors.Is(err, context.DeadlineExceeded) || sent != notSent || waited > 2*time.Second {
		t.Errorf("queued: %v, sent %d, after %v; want context.DeadlineExceeded, never sent, at its deadline", err, sent, waited)
	}
	type result struct {
		sent   int64
		waited time.Duration
		err    error
	}
	out := make(chan result, 1)
	go func() {
		sent, waited, err := do(300 * time.Millisecond)
		out <- result{sent, waited, err}
	}()
	for {
		b.mu.Lock()
		n := 0
		for _, c := range b.queue {
			if c.state.Load() == callQueued {
				n++
			}
		}
		b.mu.Unlock()
		if n == 1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	b.release() // the request in flight returns: the queued call is sent, to a frozen server
	r := <-out
	if !errors.Is(r.err, context.DeadlineExceeded) || r.sent == notSent || r.waited > 2*time.Second {
		t.Errorf("sent: %v, sent %d, after %v; want context.DeadlineExceeded, sent, at its deadline", r.err, r.sent, r.waited)
	}
	srv.Thaw(t)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(time.Millisecond) {
		b.mu.Lock()
		busy, flying := b.busy, len(b.flying)
		b.mu.Unlock()
		if busy == 0 && flying == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("20s after the thaw: busy %d, %d batches in flight; want 0, 0", busy, flying)
		}
	}
}

// Options: bad sizes are refused, 0 turns pipelining off.
func TestPipeliningOption(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer client.Close()
	for _, n := range []int{-1, maxPipeline + 1} {
		if _, err := New(client, WithPipelining(n)); err == nil {
			t.Errorf("WithPipelining(%d) accepted", n)
		}
	}
	s, err := New(client, WithPipelining(0))
	if err != nil || s.health.whole.pipe != nil {
		t.Errorf("WithPipelining(0): %v, pipelining %v", err, s.health.whole.pipe != nil)
	}
	s, err = New(client)
	if err != nil || s.health.whole.pipe == nil || s.health.whole.pipe.max != defaultPipeline {
		t.Errorf("default: %v, pipelining %+v", err, s.health.whole.pipe)
	}
}

// pipeStats returns how many Takes s sent in pipelines, and how many of
// them again after NOSCRIPT, over all its servers.
func pipeStats(s *Store) (pipelined, resent int64) {
	s.health.each(func(n *node) {
		if n.pipe != nil {
			pipelined += n.pipe.pipelined.Load()
			resent += n.pipe.resent.Load()
		}
	})
	return pipelined, resent
}

// A queue that starts with more than one batch of abandoned calls still
// sends the live calls behind them: the slot is not given up while a live
// call is queued.
func TestPipelineAbandonedRunDoesNotStrand(t *testing.T) {
	srv := redistest.StartServer(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	t.Cleanup(func() { _ = client.Close() })
	b := &batcher{client: client, scripts: &runner{client: client}, max: 1}
	b.busy = 1 // the one slot is in use: calls queue
	for i := 0; i < 2*maxBatch+7; i++ {
		c := &call{ctx: context.Background(), done: make(chan struct{}, 1)}
		c.state.Store(callAbandoned)
		b.queue = append(b.queue, c)
	}
	const live = 5
	var calls []*call
	for i := 0; i < live; i++ {
		c := &call{ctx: context.Background(), script: fixedScript, done: make(chan struct{}, 1),
			cmd: []any{"eval", "return " + strconv.Itoa(i), 0}}
		calls = append(calls, c)
		b.queue = append(b.queue, c)
	}
	b.release() // the request in flight returns
	for i, c := range calls {
		select {
		case <-c.done:
			if c.err != nil || c.reply != int64(i) {
				t.Errorf("live call %d: %v %v, want %d", i, c.reply, c.err, i)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("live call %d queued behind %d abandoned ones got no answer within 10s", i, 2*maxBatch+7)
		}
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		b.mu.Lock()
		busy, queued := b.busy, len(b.queue)
		b.mu.Unlock()
		if busy == 0 && queued == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("10s after the drain: busy %d, queued %d; want 0, 0", busy, queued)
		}
	}
}
