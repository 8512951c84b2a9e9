package redistest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestClusterThreeMasters(t *testing.T) {
	Slow(t)
	t.Parallel()
	ctx := context.Background()
	c := StartCluster(t, 3, 0)
	if len(c.Nodes) != 3 || len(c.Addrs) != 3 {
		t.Fatalf("%d nodes, %d addrs; want 3", len(c.Nodes), len(c.Addrs))
	}
	rdb := c.Client(t)

	// Enough keys to land on every master; each must be readable from the
	// node MasterOf names, through a plain client.
	byMaster := make(map[*Server][]string)
	for i := range 30 {
		key := fmt.Sprintf("key-%d", i)
		if err := rdb.Set(ctx, key, key, 0).Err(); err != nil {
			t.Fatalf("SET %s: %v", key, err)
		}
		m := c.MasterOf(t, key)
		byMaster[m] = append(byMaster[m], key)
	}
	if len(byMaster) != 3 {
		t.Fatalf("30 keys landed on %d masters, want 3", len(byMaster))
	}
	for m, keys := range byMaster {
		node := m.Client(t)
		for _, key := range keys {
			if got, err := node.Get(ctx, key).Result(); err != nil || got != key {
				t.Errorf("GET %s on its master %s = %q, %v", key, m.Addr, got, err)
			}
		}
		other := c.Nodes[0]
		if other == m {
			other = c.Nodes[1]
		}
		err := other.Client(t).Get(ctx, keys[0]).Err()
		if err == nil || !strings.HasPrefix(err.Error(), "MOVED") {
			t.Errorf("GET %s on %s (not its master): err = %v, want MOVED", keys[0], other.Addr, err)
		}
	}
	if err := rdb.MSet(ctx, "{a}x", 1, "{b}x", 2).Err(); err == nil || !strings.Contains(err.Error(), "CROSSSLOT") {
		t.Errorf("MSET across slots: err = %v, want CROSSSLOT", err)
	}
}

func TestClusterFailover(t *testing.T) {
	Slow(t)
	t.Parallel()
	ctx := context.Background()
	c := StartCluster(t, 3, 1)
	if len(c.Nodes) != 6 {
		t.Fatalf("%d nodes, want 6", len(c.Nodes))
	}
	for i, replica := range c.Nodes[3:] {
		if err := c.checkReplicaOf(replica, c.Nodes[i]); err != nil {
			t.Fatalf("layout: %v", err)
		}
	}
	rdb := c.Client(t)

	// Manual takeover of a killed master.
	const key = "failover-key"
	if err := rdb.Set(ctx, key, "before", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	master := c.MasterOf(t, key)
	if n, err := master.Client(t).Wait(ctx, 1, 5*time.Second).Result(); err != nil || n != 1 {
		t.Fatalf("WAIT 1 replica = %d, %v", n, err)
	}
	master.Kill(t)
	promoted := c.Failover(t, master)
	if promoted == master {
		t.Fatal("Failover returned the killed master")
	}
	if got := c.MasterOf(t, key); got != promoted {
		t.Fatalf("MasterOf after Failover = %s, want the promoted %s", got.Addr, promoted.Addr)
	}
	// The client still routes the slot to the dead master (a refused dial
	// is not retried) until it reloads its slot map: every 10 s by
	// default, or now, in the background, after ReloadState.
	rdb.ReloadState(ctx)
	err := waitFor(5*time.Second, func() error {
		got, err := rdb.Get(ctx, key).Result()
		if err == nil && got != "before" {
			t.Fatalf("GET after failover = %q, want the replicated value", got)
		}
		return err
	})
	if err != nil {
		t.Fatalf("GET after failover and ReloadState: %v", err)
	}
	if err := rdb.Set(ctx, key, "after", 0).Err(); err != nil {
		t.Fatalf("SET after failover: %v", err)
	}

	// The killed master comes back as a replica of its successor.
	master.Restart(t)
	c.WaitHealthy(t)
	if err := c.checkReplicaOf(master, promoted); err != nil {
		t.Fatalf("restarted old master: %v", err)
	}

	// Automatic failover: kill another master and only wait.
	const key2 = "auto-key"
	if err := rdb.Set(ctx, key2, "v", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	victim := c.MasterOf(t, key2)
	if victim == promoted {
		t.Fatalf("%s and %s share a master; pick another key", key, key2)
	}
	if n, err := victim.Client(t).Wait(ctx, 1, 5*time.Second).Result(); err != nil || n != 1 {
		t.Fatalf("WAIT 1 replica = %d, %v", n, err)
	}
	start := time.Now()
	victim.Kill(t)
	c.WaitHealthy(t)
	t.Logf("automatic failover took %v", time.Since(start).Round(time.Millisecond))
	if got := c.MasterOf(t, key2); got == victim {
		t.Fatal("killed master still serves the key")
	}
	rdb.ReloadState(ctx)
	err = waitFor(5*time.Second, func() error {
		got, err := rdb.Get(ctx, key2).Result()
		if err == nil && got != "v" {
			t.Fatalf("GET after automatic failover = %q, want the replicated value", got)
		}
		return err
	})
	if err != nil {
		t.Fatalf("GET after automatic failover and ReloadState: %v", err)
	}
}

func TestSharedCluster(t *testing.T) {
	Slow(t)
	t.Parallel()
	ctx := context.Background()
	a, b := SharedCluster(t), SharedCluster(t)
	if a != b {
		t.Fatal("SharedCluster returned two clusters")
	}
	if len(a.Nodes) != 3 {
		t.Fatalf("%d nodes, want 3", len(a.Nodes))
	}
	rdb := a.Client(t)
	if err := rdb.Set(ctx, "shared-cluster-key", "v", time.Minute).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	if r := runRecording(t, func(tb testing.TB) { a.Nodes[0].Kill(tb) }); !strings.Contains(r.fatal, "shared") {
		t.Errorf("Kill of a shared node: fatal %q, want a refusal", r.fatal)
	}
	if r := runRecording(t, func(tb testing.TB) { a.Failover(tb, a.Nodes[0]) }); !strings.Contains(r.fatal, "shared") {
		t.Errorf("Failover in the shared cluster: fatal %q, want a refusal", r.fatal)
	}
}

func TestStartClusterBadCounts(t *testing.T) {
	t.Parallel()
	for _, counts := range [][2]int{{0, 0}, {-1, 1}, {3, -1}} {
		r := runRecording(t, func(tb testing.TB) { StartCluster(tb, counts[0], counts[1]) })
		if !strings.Contains(r.fatal, "need masters >= 1") {
			t.Errorf("StartCluster(%d, %d): fatal %q, want a clear refusal", counts[0], counts[1], r.fatal)
		}
	}
}

func TestParseClusterNodes(t *testing.T) {
	t.Parallel()
	const text = `07c37dfeb235213a872192d90877d0cd55635b91 127.0.0.1:30004@31004,host-a slave e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 0 1426238317239 4 connected
67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1 127.0.0.1:30002@31002 master - 0 1426238316232 2 connected 5461-10922
e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 127.0.0.1:30001@31001 myself,master - 0 0 1 connected 0-5460 [5461->-67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1] 16383
6ec23923021cf3ffec47632106199cb7f496ce01 127.0.0.1:30005@31005 master,fail? - 1426238316232 0 5 disconnected
`
	nodes := parseClusterNodes(text)
	if len(nodes) != 4 {
		t.Fatalf("%d nodes, want 4", len(nodes))
	}
	replica, master := nodes[0], nodes[2]
	if replica.addr != "127.0.0.1:30004" || !replica.flags["slave"] || replica.master != master.id {
		t.Errorf("replica parsed as %+v", replica)
	}
	if !master.flags["myself"] || strings.Join(master.slots, " ") != "0-5460 16383" {
		t.Errorf("master parsed as %+v", master)
	}
	for slot, want := range map[int]bool{0: true, 5460: true, 5461: false, 16383: true, 16382: false} {
		if got := master.servesSlot(slot); got != want {
			t.Errorf("servesSlot(%d) = %v, want %v", slot, got, want)
		}
	}
	if !nodes[3].flags["fail?"] || len(nodes[3].slots) != 0 {
		t.Errorf("failing node parsed as %+v", nodes[3])
	}
	if got, want := replica.summary(), "07c37dfeb235213a872192d90877d0cd55635b91 127.0.0.1:30004 replica-of-e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca "; got != want {
		t.Errorf("summary = %q, want %q", got, want)
	}
}
