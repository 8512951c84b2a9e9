package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// SentinelMaster is the name the Sentinels of StartSentinel monitor.
const SentinelMaster = "sluice"

// Sentinel is a Redis master with one replica, watched by three Sentinels
// (redis-server --sentinel) with a quorum of two, which fail over 300 ms
// after the master stops answering.
type Sentinel struct {
	Master, Replica *Server
	Sentinels       []*Server
}

// StartSentinel starts a master, its replica and three Sentinels on free
// 127.0.0.1 ports, and returns once the Sentinels know the replica. The
// processes are killed at tb.Cleanup. Like StartServer, it skips without
// redis-server unless CI is true.
func StartSentinel(tb testing.TB) *Sentinel {
	tb.Helper()
	master := StartServer(tb)
	_, port, _ := net.SplitHostPort(master.Addr)
	replica := StartServer(tb, "--replicaof", "127.0.0.1", port)
	s := &Sentinel{Master: master, Replica: replica}
	for range 3 {
		s.Sentinels = append(s.Sentinels, started(tb, func(dir string) (*Server, error) {
			return startSentinel(dir, port)
		}))
	}
	if err := waitFor(startTimeout, s.knowReplica); err != nil {
		tb.Fatalf("redistest: the Sentinels did not find the replica %s: %v", replica.Addr, err)
	}
	return s
}

// Addrs returns the Sentinels' addresses, for redis.FailoverOptions.
func (s *Sentinel) Addrs() []string {
	out := make([]string, len(s.Sentinels))
	for i, sen := range s.Sentinels {
		out[i] = sen.Addr
	}
	return out
}

// MasterAddr returns the master's address as the first Sentinel that
// answers reports it.
func (s *Sentinel) MasterAddr(tb testing.TB) string {
	tb.Helper()
	var last error
	for _, sen := range s.Sentinels {
		var master string
		last = withSentinel(sen.Addr, func(ctx context.Context, c *redis.SentinelClient) error {
			addr, err := c.GetMasterAddrByName(ctx, SentinelMaster).Result()
			if err == nil && len(addr) == 2 {
				master = net.JoinHostPort(addr[0], addr[1])
			}
			return err
		})
		if master != "" {
			return master
		}
	}
	tb.Fatalf("redistest: no Sentinel names the master: %v", last)
	return ""
}

// WaitPromoted waits until the Sentinels name the replica as the master,
// for at most timeout, and returns when that was seen.
func (s *Sentinel) WaitPromoted(tb testing.TB, timeout time.Duration) time.Time {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if s.MasterAddr(tb) == s.Replica.Addr {
			return time.Now()
		}
		if time.Now().After(deadline) {
			tb.Fatalf("redistest: the replica %s was not promoted within %v", s.Replica.Addr, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// knowReplica returns nil once every Sentinel knows the replica.
func (s *Sentinel) knowReplica() error {
	for _, sen := range s.Sentinels {
		n := 0
		err := withSentinel(sen.Addr, func(ctx context.Context, c *redis.SentinelClient) error {
			rs, err := c.Replicas(ctx, SentinelMaster).Result()
			n = len(rs)
			return err
		})
		if err == nil && n == 0 {
			err = errors.New("no replica known")
		}
		if err != nil {
			return fmt.Errorf("sentinel %s: %w", sen.Addr, err)
		}
	}
	return nil
}

// startSentinel starts one Sentinel with its configuration file in dir,
// monitoring the master on masterPort.
func startSentinel(dir, masterPort string) (*Server, error) {
	conf := filepath.Join(dir, "sentinel.conf")
	text := fmt.Sprintf("sentinel monitor %[1]s 127.0.0.1 %[2]s 2\n"+
		"sentinel down-after-milliseconds %[1]s 300\n"+
		"sentinel failover-timeout %[1]s 2000\n"+
		"sentinel parallel-syncs %[1]s 1\n", SentinelMaster, masterPort)
	if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
		return nil, fmt.Errorf("write sentinel.conf: %w", err)
	}
	return launchOnFreePort(freePort, filepath.Join(dir, "sentinel.log"), func(port string) []string {
		// The configuration file must come first; Sentinel rewrites it.
		return []string{conf, "--sentinel", "--port", port, "--bind", "127.0.0.1", "--dir", dir}
	})
}

func withSentinel(addr string, f func(context.Context, *redis.SentinelClient) error) error {
	c := redis.NewSentinelClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
	defer cancel()
	return f(ctx, c)
}
