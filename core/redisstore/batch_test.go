package redisstore

import (
	"context"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/internal/redistest"
)

// batchStep is one Take of a batch, or a Charge: its key, cost and
// limits.
type batchStep struct {
	key    string
	n      int64
	limits []store.Limit
	charge bool
}

// batchSteps is a batch over every algorithm (its limits over period): keys repeated, mixed costs,
// dry runs (negative), costs denied and beyond capacity, a key of the
// wrong type ("bad", a list), and calls of the take script among them
// (two limits, one of the wrong type, an InFlight limit, a Charge).
func batchSteps(period time.Duration) []batchStep {
	var out []batchStep
	for _, l := range allAlgorithms() {
		l.Period = period
		loose := store.Limit{Algorithm: store.GCRA, Rate: 1000, Period: time.Second, Burst: 1000}
		for i, s := range []struct {
			key string
			n   int64
		}{{"a", 1}, {"b", 2}, {"a", 2}, {"a", -2}, {"c", 1}, {"bad", 1}, {"a", 3}, {"b", -9}, {"a", 1}, {"b", 3}, {"a", 1}, {"c", 6}, {"a", -1}, {"bad", 1}} {
			st := batchStep{s.key, s.n, []store.Limit{l}, false}
			switch i {
			case 4, 13: // the take script, between lean calls on the same keys
				st.limits = append(st.limits, loose)
			case 9:
				st.limits = append(st.limits, store.MaxInFlight(4, time.Minute))
			case 10:
				st.charge = true
			}
			out = append(out, st)
		}
	}
	return out
}

// newFrozen returns a miniredis whose clock stands at t0 plus 123.456789 s,
// a client of it, and a Store on it whose lists stand for "bad"'s keys.
func newFrozen(t *testing.T) (*miniredis.Miniredis, *redis.Client, *Store) {
	m := miniredis.RunT(t)
	m.SetTime(t0.Add(123456789 * time.Microsecond))
	client := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = client.Close() })
	s, err := New(client, append(bare(), WithPipelining(0))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	for _, l := range allAlgorithms() {
		p, _ := s.prepare(specs(l)[0])
		if _, err := m.Lpush(s.redisKey("bad", p.state), "x"); err != nil {
			t.Fatal(err)
		}
	}
	loadOthers(context.Background(), client, nil) // no call meets NOSCRIPT
	return m, client, s
}

// batchCalls builds the script calls of steps on s and the pipeline's
// calls of them.
func batchCalls(t *testing.T, s *Store, steps []batchStep) ([]scriptCall, []*call) {
	var scs []scriptCall
	var live []*call
	for _, st := range steps {
		c, err := s.call(st.key, st.n, specs(st.limits...))
		if st.charge {
			c, err = s.takeCall(st.key, st.n, specs(st.limits...), true)
		}
		if err != nil {
			t.Fatal(err)
		}
		scs = append(scs, c)
		live = append(live, &call{ctx: context.Background(), script: c.script, cmd: c.cmd, done: make(chan struct{}, 1)})
	}
	return scs, live
}

// commandCounter counts the commands a client sends, by name and by the
// script an EVALSHA runs.
type commandCounter struct {
	mu   sync.Mutex
	byID map[string]int
}

func (c *commandCounter) note(cmds ...redis.Cmder) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byID == nil {
		c.byID = map[string]int{}
	}
	for _, cmd := range cmds {
		id := cmd.Name()
		if args := cmd.Args(); id == "evalsha" && len(args) > 1 {
			id += " " + fmt.Sprint(args[1])
		}
		c.byID[id]++
	}
}

func (c *commandCounter) count(id string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.byID[id]
}

func (c *commandCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *commandCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.note(cmd)
		return next(ctx, cmd)
	}
}

func (c *commandCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.note(cmds...)
		return next(ctx, cmds)
	}
}

// A pipeline's calls sent as batch scripts get, call by call, the reply
// (or the error) that each gets sent alone, one after the other, at the
// same Redis time, and leave the same state: for every lean script, with
// keys repeated, dry runs, denials, a key of the wrong type and take
// script calls among them; twice, the second time on the state the first
// left (each key's first call reads it with the batch's MGET).
func TestBatchMatchesCallsAlone(t *testing.T) {
	mb, cb, sb := newFrozen(t)
	ma, ca, sa := newFrozen(t)
	counter := &commandCounter{}
	cb.AddHook(counter)
	for round := 0; round < 2; round++ { // the second on the state the first left
		diffBatch(t, batchSteps(time.Second), cb, sb, ca, sa, true)
	}
	if ka, kb := ma.Dump(), mb.Dump(); ka != kb {
		t.Errorf("state after the batch:\n%s\nafter the calls alone:\n%s", kb, ka)
	}
	// A call joins an open batch only when no batch after it holds a call
	// on one of its keys. Each round, each algorithm's lean calls go in
	// one batch, and its take script calls in one after it, which its
	// Charge of "a" cannot join earlier: its lean call on "a" after the
	// Charge goes after that batch, alone (as a lean script call); GCRA's,
	// with its lean call on "c", in a second batch. GCRA and LeakyBucket
	// share a lean script, not a limit.
	for sc, want := range map[*script][2]int{tatScript: {6, 2}, tokenScript: {2, 2}, fixedScript: {2, 2},
		slidingScript: {2, 2}, logScript: {2, 2}, takeScript: {12, 0}} {
		if n := counter.count("evalsha " + sc.batch.Hash()); n != want[0] {
			t.Errorf("the batch script of %s ran %d times, want %d", sc.Hash(), n, want[0])
		}
		if n := counter.count("evalsha " + sc.Hash()); n != want[1] {
			t.Errorf("the script %s ran %d times alone, want %d", sc.Hash(), n, want[1])
		}
	}
	if n := counter.count("eval"); n != 0 {
		t.Errorf("%d calls met NOSCRIPT", n)
	}
}

// The same on a real Redis, whose clock runs: hour-long limits, so that
// the time between the two runs moves no figure compared.
func TestRedisBatchMatchesCallsAlone(t *testing.T) {
	client := sharedClient(t)
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	st := func(name string) *Store {
		s := realStore(t, client, WithPipelining(0), WithPrefix("batch:"+run+":"+name+":"))
		for _, l := range allAlgorithms() {
			l.Period = time.Hour
			p, _ := s.prepare(specs(l)[0])
			if err := client.LPush(context.Background(), s.redisKey("bad", p.state), "x").Err(); err != nil {
				t.Fatal(err)
			}
		}
		return s
	}
	loadOthers(context.Background(), client, nil)
	b, a := st("b"), st("a")
	for round := 0; round < 2; round++ {
		diffBatch(t, batchSteps(time.Hour), client, b, client, a, false)
	}
}

// diffBatch sends steps in one pipeline on cb (sb's calls) and one by one
// on ca (sa's), and compares each call's reply, exact or as figures that
// do not move with time.
func diffBatch(t *testing.T, steps []batchStep, cb redis.UniversalClient, sb *Store, ca redis.UniversalClient, sa *Store, exact bool) {
	scs, live := batchCalls(t, sb, steps)
	b := &batcher{client: cb, scripts: sb.scripts, max: 1}
	b.send(live)
	alone, _ := batchCalls(t, sa, steps)
	denied, failed := 0, 0
	for i, st := range steps {
		c := live[i]
		<-c.done
		reply, err := ca.Do(context.Background(), alone[i].cmd...).Result()
		what := fmt.Sprintf("step %d: Take(%s, %d) on %v", i, st.key, st.n, st.limits)
		if (err != nil) != (c.err != nil) {
			t.Fatalf("%s: batched %v %v, alone %v %v", what, c.reply, c.err, reply, err)
		}
		if err != nil {
			failed++
			if !strings.Contains(err.Error(), "WRONGTYPE") || !strings.Contains(c.err.Error(), "WRONGTYPE") || !isReply(c.err) {
				t.Errorf("%s: batched %v, alone %v; want WRONGTYPE replies", what, c.err, err)
			}
			if !exact && !strings.HasPrefix(c.err.Error(), "WRONGTYPE ") { // Redis' own code, as alone
				t.Errorf("%s: batched %q, want Redis' WRONGTYPE error", what, c.err)
			}
			continue
		}
		if exact && !reflect.DeepEqual(c.reply, reply) {
			t.Errorf("%s: batched replied %v, alone %v", what, c.reply, reply)
		}
		got, err := scs[i].decode(c.reply, st.n)
		if err != nil {
			t.Errorf("%s: %v", what, err)
		}
		want, err := alone[i].decode(reply, st.n)
		if err != nil {
			t.Errorf("%s: %v", what, err)
		}
		if got.Allowed != want.Allowed || got.Remaining != want.Remaining || got.Limit != want.Limit {
			t.Errorf("%s: batched %+v, alone %+v", what, got, want)
		}
		if !got.Allowed {
			denied++
		}
	}
	if denied < len(allAlgorithms()) || failed < 4 {
		t.Errorf("%d denials and %d errors; the steps should have more", denied, failed)
	}
}

// A batch the client sends again (every cost already written once) is
// refused call by call, charging nothing; a batch of more than
// maxScriptBatch limits goes as several: lean and take script calls.
func TestBatchResentRefused(t *testing.T) {
	m, client, s := newFrozen(t)
	m.FlushAll()
	counter := &commandCounter{}
	client.AddHook(counter)
	var steps []batchStep
	for i := 0; i < maxScriptBatch+3; i++ {
		steps = append(steps, batchStep{"k" + strconv.Itoa(i%5), 1, []store.Limit{store.PerSecond(100)}, false},
			batchStep{"t" + strconv.Itoa(i%5), 1, []store.Limit{store.PerSecond(100), store.PerMinute(1000)}, false})
	}
	_, live := batchCalls(t, s, steps)
	for _, c := range live {
		for _, a := range c.cmd {
			if o, ok := a.(*once); ok {
				_, _ = o.MarshalBinary() // the first sending
			}
		}
	}
	b := &batcher{client: client, scripts: s.scripts, max: 1}
	b.send(live)
	for i, c := range live {
		<-c.done
		if c.err == nil || !strings.HasPrefix(c.err.Error(), resentError) {
			t.Errorf("call %d: %v %v, want %q", i, c.reply, c.err, resentError)
		}
	}
	if keys := m.Keys(); len(keys) != 0 {
		t.Errorf("a refused batch wrote %v", keys)
	}
	for sc, want := range map[*script]int{tatScript: 2, takeScript: 3} { // 131 limits; 262
		if n := counter.count("evalsha " + sc.batch.Hash()); n != want {
			t.Errorf("%d calls of %s went as %d batch script calls, want %d", len(steps)/2, sc.Hash(), n, want)
		}
	}
}

// slot is Redis' CLUSTER KEYSLOT, hash tags included.
func TestSlot(t *testing.T) {
	t.Parallel()
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: redistest.SharedCluster(t).Addrs})
	t.Cleanup(func() { _ = client.Close() })
	keys := []string{"", "123456789", "foo", "{user1000}.following", "foo{}{bar}", "foo{{bar}}zap", "foo{bar}{zap}",
		"{", "}{", "a{b", "x{é}", "sluice:{=k}:g1/2b1p0", "sluice:{#0123456789abcdef0123456789abcdef}:t5/1000000b7p0"}
	for i := 0; i < 200; i++ {
		keys = append(keys, fmt.Sprintf("p{=key%d}:w40/3600000000b0p0", i), fmt.Sprint(i*7919))
	}
	for _, k := range keys {
		want, err := client.ClusterKeySlot(context.Background(), k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got := slot(k); int64(got) != want {
			t.Errorf("slot(%q) = %d, want %d", k, got, want)
		}
	}
}

// floodCounted runs goroutines Takes each of cost 1 on keys (of limits)
// through s and returns how many each key admitted.
func floodCounted(t *testing.T, s *Store, keys []string, goroutines, per int, limits ...store.Limit) map[string]int64 {
	t.Helper()
	var mu sync.Mutex
	admitted := map[string]int64{}
	var wg sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < per; i++ {
				k := keys[(g+i)%len(keys)]
				r, err := s.Take(context.Background(), k, 1, specs(limits...)...)
				if err != nil {
					t.Errorf("take: %v", err)
					return
				}
				if r.Allowed {
					mu.Lock()
					admitted[k]++
					mu.Unlock()
				}
			}
		}(g)
	}
	wg.Wait()
	return admitted
}

// Under concurrency the pipeline sends Takes of one key as batch scripts
// (fewer script calls than decisions), and every key admits exactly its
// limit, on one server and on a Cluster over keys of many slots: Takes of
// one limit (the lean scripts') and of two (the take script's).
func TestBatchesUnderConcurrency(t *testing.T) {
	t.Parallel()
	cluster := redistest.SharedCluster(t)
	for _, c := range []struct {
		name   string
		client redis.UniversalClient
	}{
		{"server", sharedClient(t)},
		{"cluster", redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs, MaxRetries: -1})},
	} {
		t.Cleanup(func() { _ = c.client.Close() })
		counter := &commandCounter{}
		c.client.AddHook(counter)
		if cc, ok := c.client.(*redis.ClusterClient); ok {
			cc.OnNewNode(func(n *redis.Client) { n.AddHook(counter) })
		}
		run := strconv.FormatInt(time.Now().UnixNano(), 36)
		roomy := store.Limit{Algorithm: store.FixedWindow, Rate: 1000, Period: time.Hour}
		for i, l := range append(allAlgorithms(), allAlgorithms()...) {
			l.Rate, l.Period, l.Burst = 40, time.Hour, 0
			limits := []store.Limit{l}
			if i >= len(allAlgorithms()) {
				limits = append(limits, roomy) // the take script
			}
			s := realStore(t, c.client, WithPipelining(1), WithDenyCache(0))
			var keys []string
			for k := 0; k < 12; k++ {
				keys = append(keys, fmt.Sprintf("batch:%s:%s:%d:%d", run, mustID(t, l), len(limits), k))
			}
			got := floodCounted(t, s, keys, 32, 30, limits...) // 80 Takes per key
			for _, k := range keys {
				if want := specs(l)[0].Capacity(); got[k] != want {
					t.Errorf("%s, %v: key %s admitted %d of 80, want %d", c.name, limits, k, got[k], want)
				}
			}
			var batched int64
			s.health.each(func(n *node) {
				if n.pipe != nil {
					batched += n.pipe.batched.Load()
				}
			})
			if batched == 0 {
				t.Errorf("%s, %v: no Take went in a batch script", c.name, limits)
			}
		}
		scripts, batches := 0, 0
		for _, sc := range []*script{tatScript, tokenScript, fixedScript, slidingScript, logScript, takeScript} {
			scripts += counter.count("evalsha "+sc.Hash()) + counter.count("evalsha "+sc.batch.Hash())
			batches += counter.count("evalsha " + sc.batch.Hash())
		}
		if counter.count("evalsha "+takeScript.batch.Hash()) == 0 {
			t.Errorf("%s: no take batch script ran", c.name)
		}
		decisions := 2 * len(allAlgorithms()) * 12 * 80
		t.Logf("%s: %d decisions in %d script calls, %d of them batches", c.name, decisions, scripts, batches)
		if batches == 0 || scripts >= decisions {
			t.Errorf("%s: %d decisions took %d script calls (%d batches), want fewer calls", c.name, decisions, scripts, batches)
		}
	}
}

// A batch on a slot that is migrating, holding a key that is still on
// the source and one that is not (TRYAGAIN for the batch), goes again
// call by call: the first runs there, the second gets the ASK it would
// have got alone. The same for a lean script's batch and the take
// script's.
func TestClusterBatchOnMigratingSlot(t *testing.T) {
	t.Parallel()
	cluster := redistest.StartCluster(t, 2, 0)
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs, MaxRetries: -1})
	t.Cleanup(func() { _ = client.Close() })
	s := realStore(t, client)
	ctx := context.Background()
	here := store.Limit{Algorithm: store.GCRA, Rate: 10, Period: time.Hour}
	roomy := store.Limit{Algorithm: store.FixedWindow, Rate: 1000, Period: time.Hour}
	for _, l := range [][]store.Limit{{here}, {here, roomy}} {
		mig := fmt.Sprint("mig", len(l))
		takeOK(t, s, mig, 1, l...) // its state, on its master
		gone := "gone"             // a key of the same slot, with no state
		for i := 0; slot(s.redisKey(gone, "")) != slot(s.redisKey(mig, "")); i++ {
			gone = "gone" + strconv.Itoa(i)
		}
		from, stable := migrating(t, cluster, s.redisKey(mig, ""))
		loadOthers(ctx, from, nil)
		_, live := batchCalls(t, s, []batchStep{{mig, 1, l, false}, {gone, 1, l, false}, {mig, 1, l, false}})
		b := &batcher{client: from, scripts: s.scripts, max: 1, shards: bySlot}
		if again := b.send(live); again != 3 || b.batched.Load() != 3 {
			t.Errorf("%v: %d of %d batched calls sent again, want 3 of 3", l, again, b.batched.Load())
		}
		for i, c := range live {
			<-c.done
			if r, _ := redirectOf(c.err); i == 1 && r != redirectAsk || i != 1 && c.err != nil {
				t.Errorf("%v: call %d: %v %v; want a reply, and ASK for the key not there", l, i, c.reply, c.err)
			}
		}
		stable()
		if r := takeOK(t, s, mig, 0, l...); r.Remaining != 7 {
			t.Errorf("%v: after the batch: %d left, want 7", l, r.Remaining)
		}
	}
}

// Each batch script is its script's own text up to the driver (a lean
// script's, or the take script's): no copy of any algorithm, and one
// reading of the clock.
func TestBatchSourceIsLeanSource(t *testing.T) {
	_, rest, _ := strings.Cut(source("lean.lua"), oneMark)
	driver, _, _ := strings.Cut(rest, batchMark) // the lean script's
	if head, ok := strings.CutSuffix(takeSource, takeOne); !ok || !strings.HasPrefix(takeBatch, head) || strings.Contains(takeBatch, takeOne) {
		t.Errorf("the take batch script is not the take script's text with another driver:\n%s", takeBatch)
	}
	if n := strings.Count(takeBatch, "call('TIME')"); n != 1 {
		t.Errorf("the take batch script reads TIME %d times, want once", n)
	}
	for one, batch := range map[string]string{tatSource: tatBatch, tokenSource: tokenBatch, fixedSource: fixedBatch, slidingSource: slidingBatch, logSource: logBatch} {
		head, ok := strings.CutSuffix(one, driver)
		if !ok || !strings.HasPrefix(batch, head) || strings.Contains(batch, driver) {
			t.Errorf("a batch script is not its lean script's text with another driver:\n%s", batch)
		}
		if n := strings.Count(batch, "redis.call('TIME')"); n != 1 {
			t.Errorf("a batch script reads TIME %d times, want once", n)
		}
	}
}

// On a Ring, whose shards two tags of one slot may split, a batch holds
// the keys of one hash tag: Takes over many keys on two shards batch and
// every key admits exactly its limit, its state on its own shard (a
// batch sent to the wrong one would admit more).
func TestRingBatches(t *testing.T) {
	t.Parallel()
	a, b := redistest.StartServer(t), redistest.StartServer(t)
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": a.Addr, "b": b.Addr}, MaxRetries: -1})
	t.Cleanup(func() { _ = ring.Close() })
	l := store.Limit{Algorithm: store.GCRA, Rate: 40, Period: time.Hour}
	s := realStore(t, ring, WithPipelining(1), WithDenyCache(0))
	var keys []string
	for i := 0; i < 24; i++ {
		keys = append(keys, fmt.Sprintf("ring%d", i))
	}
	got := floodCounted(t, s, keys, 32, 60, l) // 80 Takes per key on average, over 40 each
	for _, k := range keys {
		if got[k] != 40 {
			t.Errorf("key %s admitted %d, want 40", k, got[k])
		}
		if r := takeOK(t, s, k, 1, l); r.Allowed {
			t.Errorf("key %s: a 41st Take allowed", k)
		}
	}
	if s.health.whole.pipe.batched.Load() == 0 {
		t.Error("no Take went in a batch script")
	}
	for _, srv := range []*redistest.Server{a, b} {
		if n := srv.Client(t).DBSize(context.Background()).Val(); n == 0 || n == int64(len(keys)) {
			t.Errorf("%s holds %d of the %d keys; want them spread over both shards", srv.Addr, n, len(keys))
		}
	}
}

// migrating marks the slot of the Redis key state migrating from its
// master in cluster (a Cluster of two masters) to the other master, and
// returns a client of the source and a func that makes the slot stable
// where it was and closes the clients.
func migrating(t *testing.T, cluster *redistest.Cluster, state string) (from *redis.Client, stable func()) {
	t.Helper()
	ctx := context.Background()
	src := cluster.MasterOf(t, state)
	var dst *redistest.Server
	for _, n := range cluster.Nodes {
		if n != src {
			dst = n
		}
	}
	from = redis.NewClient(&redis.Options{Addr: src.Addr, MaxRetries: -1})
	to := redis.NewClient(&redis.Options{Addr: dst.Addr})
	slot := from.ClusterKeySlot(ctx, state).Val()
	stable = func() {
		for _, c := range []*redis.Client{from, to} { // the slot stays where it was
			_ = c.Do(ctx, "cluster", "setslot", slot, "stable").Err()
			_ = c.Close()
		}
	}
	for _, c := range [...]struct {
		node, other *redis.Client
		how         string
	}{{to, from, "importing"}, {from, to, "migrating"}} {
		if err := c.node.Do(ctx, "cluster", "setslot", slot, c.how, c.other.ClusterMyID(ctx).Val()).Err(); err != nil {
			stable()
			t.Fatal(err)
		}
	}
	return from, stable
}
