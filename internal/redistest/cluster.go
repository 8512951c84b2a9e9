package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	// clusterSlots is the number of hash slots of a Redis Cluster.
	clusterSlots = 16384
	// clusterNodeTimeout is --cluster-node-timeout in milliseconds: how long
	// a node may be unreachable before failover starts.
	clusterNodeTimeout = 2000
	// clusterTimeout bounds every wait for a cluster to settle: creation,
	// WaitHealthy, Failover. An automatic failover needs about twice the
	// node timeout.
	clusterTimeout = 30 * time.Second
	// busPortOffset is the distance of a node's cluster bus port from its
	// client port; Redis before 7.0 cannot set it otherwise.
	busPortOffset = 10000
)

// Cluster is a Redis Cluster of redis-server processes on 127.0.0.1.
//
// Nodes[:masters] start as the masters, in slot order; the replicas of
// master i follow as Nodes[masters+i*replicas : masters+(i+1)*replicas].
// Roles change with failovers: MasterOf tells who serves a key now.
//
// A Cluster is created by StartCluster or SharedCluster; the zero value is
// not usable. Its methods are safe for concurrent use.
type Cluster struct {
	// Addrs holds the address of every node, Addrs[i] == Nodes[i].Addr.
	Addrs []string
	// Nodes holds every node, masters first.
	Nodes []*Server

	shared bool
}

// StartCluster starts masters*(1+replicas) cluster nodes, assigns the
// 16384 slots evenly to the masters, attaches replicas replicas to each
// master, and returns once every node reports cluster_state:ok, all nodes
// agree on the slot owners and every replica is linked to its master. The
// nodes run with --cluster-node-timeout 2000 and
// --cluster-replica-validity-factor 0, so a replica of a dead master is
// promoted automatically about 3 to 5 seconds later. The processes are
// killed at tb.Cleanup. Missing redis-server is handled as in StartServer;
// masters < 1 or replicas < 0 fail the test.
func StartCluster(tb testing.TB, masters, replicas int) *Cluster {
	tb.Helper()
	if masters < 1 || replicas < 0 {
		tb.Fatalf("redistest: StartCluster(%d masters, %d replicas): need masters >= 1 and replicas >= 0", masters, replicas)
	}
	return started(tb, func(dir string) (*Cluster, error) {
		return startCluster(dir, masters, replicas, false)
	})
}

// Client returns a go-redis cluster client seeded with every node, with
// default options, closed at tb.Cleanup. Note that after a failover such a
// client keeps sending the moved slots to the dead master (a refused dial
// is not retried) until it reloads its slot map: every 10 seconds by
// default (ClusterOptions.ClusterStateReloadInterval), or soon after
// ClusterClient.ReloadState.
func (c *Cluster) Client(tb testing.TB) *redis.ClusterClient {
	return closedAtCleanup(tb, redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs}))
}

// WaitHealthy waits until the running nodes form a healthy cluster: each
// reports cluster_state:ok with all slots served, sees every other running
// node without failure flags, agrees with the others on every running
// node's role, master and slots, and, when a replica, is linked to its
// master; no slot is served by a killed node. Use it after killing or
// restarting nodes. It fails the test after 30 seconds, describing what was
// still wrong.
func (c *Cluster) WaitHealthy(tb testing.TB) {
	tb.Helper()
	if err := waitFor(clusterTimeout, c.health); err != nil {
		tb.Fatalf("redistest: cluster not healthy: %v", err)
	}
}

// MasterOf returns the node serving the slot of key now.
func (c *Cluster) MasterOf(tb testing.TB, key string) *Server {
	tb.Helper()
	s, err := c.masterOf(key)
	if err != nil {
		tb.Fatalf("redistest: master of %q: %v", key, err)
	}
	return s
}

// Failover promotes a replica of master and returns it once the cluster is
// healthy again (see WaitHealthy) with the replica serving master's slots.
// A running master hands over with CLUSTER FAILOVER, losing no
// acknowledged write; a killed one is replaced at once with CLUSTER FAILOVER
// TAKEOVER, without waiting for the node timeout. It fails the test when
// master has no running replica.
func (c *Cluster) Failover(tb testing.TB, master *Server) *Server {
	tb.Helper()
	if c.shared {
		tb.Fatalf("redistest: Failover in the shared cluster would break other tests; use StartCluster")
	}
	promoted, err := c.failover(master)
	if err != nil {
		tb.Fatalf("redistest: failover of %s: %v", master.Addr, err)
	}
	return promoted
}

func (c *Cluster) stop() {
	for _, s := range c.Nodes {
		s.stop()
	}
}

// startCluster starts and joins the nodes, each with its files in a
// subdirectory of dir.
func startCluster(dir string, masters, replicas int, shared bool) (*Cluster, error) {
	if _, err := redisServerPath(); err != nil {
		return nil, err // before creating any directory
	}
	n := masters * (1 + replicas)
	c := &Cluster{Addrs: make([]string, n), Nodes: make([]*Server, n), shared: shared}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			nodeDir := filepath.Join(dir, "node"+strconv.Itoa(i))
			if err := os.Mkdir(nodeDir, 0o755); err != nil {
				errs[i] = fmt.Errorf("create node directory: %w", err)
				return
			}
			c.Nodes[i], errs[i] = startServer(nodeDir, nil, clusterPort,
				"--cluster-enabled", "yes",
				"--cluster-config-file", filepath.Join(nodeDir, "nodes.conf"),
				"--cluster-node-timeout", strconv.Itoa(clusterNodeTimeout),
				"--cluster-replica-validity-factor", "0",
				"--repl-diskless-sync", "yes",
				"--repl-diskless-sync-delay", "0",
			)
		}()
	}
	wg.Wait()
	for _, s := range c.Nodes {
		if s != nil {
			s.shared = shared
		}
	}
	if err := errors.Join(errs...); err != nil {
		c.stop()
		return nil, fmt.Errorf("start cluster nodes: %w", err)
	}
	for i, s := range c.Nodes {
		c.Addrs[i] = s.Addr
	}
	if err := c.join(masters, replicas); err != nil {
		c.stop()
		return nil, fmt.Errorf("create cluster of %d masters with %d replicas each: %w", masters, replicas, err)
	}
	return c, nil
}

// join does what redis-cli --cluster create does: slots and distinct
// config epochs first, then MEET, then REPLICATE, then waits for health.
func (c *Cluster) join(masters, replicas int) error {
	if err := c.assignSlots(masters); err != nil {
		return err
	}
	if err := c.meetAll(); err != nil {
		return err
	}
	if err := waitFor(clusterTimeout, c.allMet); err != nil {
		return fmt.Errorf("nodes did not meet: %w", err)
	}
	if err := c.replicate(masters, replicas); err != nil {
		return err
	}
	return waitFor(clusterTimeout, func() error {
		if err := c.health(); err != nil {
			return err
		}
		for i, s := range c.Nodes[masters:] {
			if err := c.checkReplicaOf(s, c.Nodes[i/replicas]); err != nil {
				return err
			}
		}
		return nil
	})
}

// assignSlots learns each node's ID, gives the first masters nodes equal
// shares of the slots, and gives every node its own config epoch.
func (c *Cluster) assignSlots(masters int) error {
	for i, s := range c.Nodes {
		err := withAdmin(s.Addr, func(ctx context.Context, rdb *redis.Client) error {
			id, err := rdb.ClusterMyID(ctx).Result()
			if err != nil {
				return fmt.Errorf("CLUSTER MYID: %w", err)
			}
			s.nodeID = id
			if i < masters {
				first, end := i*clusterSlots/masters, (i+1)*clusterSlots/masters
				slots := make([]int, 0, end-first)
				for slot := first; slot < end; slot++ {
					slots = append(slots, slot)
				}
				if err := rdb.ClusterAddSlots(ctx, slots...).Err(); err != nil {
					return fmt.Errorf("CLUSTER ADDSLOTS %d..%d: %w", first, end-1, err)
				}
			}
			// Distinct epochs spare the nodes the collision resolution.
			if err := rdb.Do(ctx, "CLUSTER", "SET-CONFIG-EPOCH", i+1).Err(); err != nil {
				return fmt.Errorf("CLUSTER SET-CONFIG-EPOCH: %w", err)
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("%s: %w", s.Addr, err)
		}
	}
	return nil
}

// meetAll has every pair of nodes meet directly: gossip alone would spread
// the nodes at one random ping per node and second, taking seconds.
func (c *Cluster) meetAll() error {
	for i, s := range c.Nodes {
		err := withAdmin(s.Addr, func(ctx context.Context, rdb *redis.Client) error {
			for _, other := range c.Nodes[i+1:] {
				host, port, _ := net.SplitHostPort(other.Addr)
				if err := rdb.ClusterMeet(ctx, host, port).Err(); err != nil {
					return fmt.Errorf("CLUSTER MEET %s: %w", other.Addr, err)
				}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("%s: %w", s.Addr, err)
		}
	}
	return nil
}

// replicate makes the nodes after the first masters replicas, replicas to
// each master in order.
func (c *Cluster) replicate(masters, replicas int) error {
	for i, s := range c.Nodes[masters:] {
		master := c.Nodes[i/replicas]
		err := withAdmin(s.Addr, func(ctx context.Context, rdb *redis.Client) error {
			return rdb.ClusterReplicate(ctx, master.nodeID).Err()
		})
		if err != nil {
			return fmt.Errorf("%s: CLUSTER REPLICATE %s: %w", s.Addr, master.Addr, err)
		}
	}
	return nil
}

// allMet reports whether every node knows every other one past the
// handshake.
func (c *Cluster) allMet() error {
	for _, s := range c.Nodes {
		nodes, err := clusterNodes(s.Addr)
		if err != nil {
			return err
		}
		if len(nodes) != len(c.Nodes) {
			return fmt.Errorf("%s knows %d of %d nodes", s.Addr, len(nodes), len(c.Nodes))
		}
		for _, n := range nodes {
			if n.flags["handshake"] || n.flags["noaddr"] {
				return fmt.Errorf("%s sees %s in state %s", s.Addr, n.addr, n.flagText)
			}
		}
	}
	return nil
}

// checkReplicaOf reports whether s sees itself as a replica of master.
func (c *Cluster) checkReplicaOf(s, master *Server) error {
	me, err := myself(s.Addr)
	if err != nil {
		return err
	}
	if !me.flags["slave"] || me.master != master.nodeID {
		return fmt.Errorf("%s is %s of %s, want replica of %s", s.Addr, me.flagText, me.master, master.nodeID)
	}
	return nil
}

// health is the condition of WaitHealthy; it describes the first problem.
// Every running node must report the cluster ok with all slots served,
// see no stopped node holding slots, see every running node and none of
// them failing or still joining, agree with the others on the cluster's
// shape, and, if it is a replica, have its link to its master up.
func (c *Cluster) health() error {
	live := make(map[string]*Server)
	for _, s := range c.Nodes {
		if s.running() {
			live[s.nodeID] = s
		}
	}
	if len(live) == 0 {
		return errors.New("no node is running")
	}
	var firstView, firstAddr string
	for _, s := range c.Nodes {
		if live[s.nodeID] == nil {
			continue
		}
		view, me, err := clusterView(s, live)
		if err != nil {
			return err
		}
		if firstAddr == "" {
			firstView, firstAddr = view, s.Addr
		} else if view != firstView {
			return fmt.Errorf("%s and %s disagree:\n%s\nversus\n%s", firstAddr, s.Addr, firstView, view)
		}
		if me == nil {
			return fmt.Errorf("%s: CLUSTER NODES has no myself line", s.Addr)
		}
		if me.flags["slave"] {
			if err := replicaLinkUp(s); err != nil {
				return err
			}
		}
	}
	return nil
}

// clusterView returns what s sees of the cluster whose running nodes are
// live (by node ID): the summaries of the running nodes, sorted and joined
// (equal on every healthy node), and s's own entry (nil when CLUSTER NODES
// has none). It reports s's cluster_state or cluster_slots_ok not ok, a
// stopped node that s sees holding slots, a running node s sees failing or
// not yet joined, and a running node s does not know.
func clusterView(s *Server, live map[string]*Server) (view string, me *clusterNode, err error) {
	info, nodesText, err := clusterState(s.Addr)
	if err != nil {
		return "", nil, fmt.Errorf("%s: %w", s.Addr, err)
	}
	if state, _ := infoField(info, "cluster_state"); state != "ok" {
		return "", nil, fmt.Errorf("%s reports cluster_state:%s", s.Addr, state)
	}
	if ok, _ := infoField(info, "cluster_slots_ok"); ok != strconv.Itoa(clusterSlots) {
		return "", nil, fmt.Errorf("%s reports cluster_slots_ok:%s", s.Addr, ok)
	}
	seen := make(map[string]bool)
	var lines []string
	for _, n := range parseClusterNodes(nodesText) {
		if n.flags["myself"] {
			me = n
		}
		if live[n.id] == nil {
			if len(n.slots) > 0 {
				return "", nil, fmt.Errorf("%s sees slots %s served by the stopped node %s", s.Addr, strings.Join(n.slots, ","), n.addr)
			}
			continue
		}
		seen[n.id] = true
		for _, bad := range []string{"fail", "fail?", "handshake", "noaddr"} {
			if n.flags[bad] {
				return "", nil, fmt.Errorf("%s sees %s as %s", s.Addr, n.addr, n.flagText)
			}
		}
		lines = append(lines, n.summary())
	}
	for id, other := range live {
		if !seen[id] {
			return "", nil, fmt.Errorf("%s does not know %s", s.Addr, other.Addr)
		}
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n"), me, nil
}

// clusterState returns the node's CLUSTER INFO and CLUSTER NODES.
func clusterState(addr string) (info, nodes string, err error) {
	err = withAdmin(addr, func(ctx context.Context, rdb *redis.Client) error {
		var err error
		if info, err = rdb.ClusterInfo(ctx).Result(); err != nil {
			return fmt.Errorf("CLUSTER INFO: %w", err)
		}
		if nodes, err = rdb.ClusterNodes(ctx).Result(); err != nil {
			return fmt.Errorf("CLUSTER NODES: %w", err)
		}
		return nil
	})
	return info, nodes, err
}

// replicaLinkUp reports a replica whose link to its master is not up.
func replicaLinkUp(s *Server) error {
	var repl string
	err := withAdmin(s.Addr, func(ctx context.Context, rdb *redis.Client) error {
		var err error
		repl, err = rdb.Info(ctx, "replication").Result()
		return err
	})
	if err != nil {
		return fmt.Errorf("%s: INFO replication: %w", s.Addr, err)
	}
	if link, _ := infoField(repl, "master_link_status"); link != "up" {
		return fmt.Errorf("replica %s: master_link_status:%s", s.Addr, link)
	}
	return nil
}

func (c *Cluster) masterOf(key string) (*Server, error) {
	for _, s := range c.Nodes {
		if !s.running() {
			continue
		}
		var slot int64
		err := withAdmin(s.Addr, func(ctx context.Context, rdb *redis.Client) error {
			var err error
			slot, err = rdb.ClusterKeySlot(ctx, key).Result()
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("%s: CLUSTER KEYSLOT: %w", s.Addr, err)
		}
		nodes, err := clusterNodes(s.Addr)
		if err != nil {
			return nil, err
		}
		for _, n := range nodes {
			if n.flags["master"] && n.servesSlot(int(slot)) {
				for _, node := range c.Nodes {
					if node.nodeID == n.id {
						return node, nil
					}
				}
				return nil, fmt.Errorf("slot %d is served by %s, not a node of this cluster", slot, n.addr)
			}
		}
		return nil, fmt.Errorf("%s knows no master of slot %d", s.Addr, slot)
	}
	return nil, errors.New("no node is running")
}

func (c *Cluster) failover(master *Server) (*Server, error) {
	var promoted *Server
	for _, s := range c.Nodes {
		if s == master || !s.running() {
			continue
		}
		if c.checkReplicaOf(s, master) == nil {
			promoted = s
			break
		}
	}
	if promoted == nil {
		return nil, fmt.Errorf("no running replica of %s", master.Addr)
	}
	args := []any{"CLUSTER", "FAILOVER"}
	if !master.running() {
		args = append(args, "TAKEOVER")
	}
	err := withAdmin(promoted.Addr, func(ctx context.Context, rdb *redis.Client) error {
		return rdb.Do(ctx, args...).Err()
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %v: %w", promoted.Addr, args, err)
	}
	err = waitFor(clusterTimeout, func() error {
		me, err := myself(promoted.Addr)
		if err != nil {
			return err
		}
		if !me.flags["master"] || len(me.slots) == 0 {
			return fmt.Errorf("%s is not yet a master with slots: %s", promoted.Addr, me.flagText)
		}
		return c.health()
	})
	if err != nil {
		return nil, err
	}
	return promoted, nil
}

// clusterNode is one line of CLUSTER NODES.
type clusterNode struct {
	id, addr, master string
	flagText         string
	flags            map[string]bool
	slots            []string // "a-b" or "a"; migration markers dropped
}

// summary is the part of a node's line that all nodes must agree on.
func (n *clusterNode) summary() string {
	role := "master"
	if n.flags["slave"] {
		role = "replica-of-" + n.master
	}
	return n.id + " " + n.addr + " " + role + " " + strings.Join(n.slots, ",")
}

func (n *clusterNode) servesSlot(slot int) bool {
	for _, r := range n.slots {
		lo, hi, isRange := strings.Cut(r, "-")
		if !isRange {
			hi = lo
		}
		a, errA := strconv.Atoi(lo)
		b, errB := strconv.Atoi(hi)
		if errA == nil && errB == nil && a <= slot && slot <= b {
			return true
		}
	}
	return false
}

// parseClusterNodes parses the reply of CLUSTER NODES:
// <id> <ip:port@cport[,hostname]> <flags> <master> <ping> <pong> <epoch> <link> <slot>...
func parseClusterNodes(text string) []*clusterNode {
	var nodes []*clusterNode
	for _, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		addr, _, _ := strings.Cut(f[1], "@")
		n := &clusterNode{id: f[0], addr: addr, flagText: f[2], master: f[3], flags: make(map[string]bool)}
		for _, flag := range strings.Split(f[2], ",") {
			n.flags[flag] = true
		}
		for _, slot := range f[8:] {
			if !strings.HasPrefix(slot, "[") {
				n.slots = append(n.slots, slot)
			}
		}
		nodes = append(nodes, n)
	}
	return nodes
}

func clusterNodes(addr string) ([]*clusterNode, error) {
	var text string
	err := withAdmin(addr, func(ctx context.Context, rdb *redis.Client) error {
		var err error
		text, err = rdb.ClusterNodes(ctx).Result()
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("%s: CLUSTER NODES: %w", addr, err)
	}
	return parseClusterNodes(text), nil
}

// myself returns the line the node at addr has about itself.
func myself(addr string) (*clusterNode, error) {
	nodes, err := clusterNodes(addr)
	if err != nil {
		return nil, err
	}
	for _, n := range nodes {
		if n.flags["myself"] {
			return n, nil
		}
	}
	return nil, fmt.Errorf("%s: CLUSTER NODES has no myself line", addr)
}

// clusterPort returns a free port P whose cluster bus port P+10000 is free
// too.
func clusterPort() (int, error) {
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("find a free port: %w", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		if port+busPortOffset > 65535 {
			_ = l.Close()
			continue
		}
		bus, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port+busPortOffset)))
		_ = l.Close()
		if err != nil {
			continue
		}
		_ = bus.Close()
		return port, nil
	}
	return 0, errors.New("find a free port: no free pair of ports P and P+10000 after 100 tries")
}

// waitFor polls cond until it returns nil or timeout passes; the error then
// is cond's last one.
func waitFor(timeout time.Duration, cond func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("still after %v: %w", timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
