package redistest

import (
	"context"
	"testing"
	"time"
)

// The Sentinels promote the replica once the master is killed.
func TestSentinelFailover(t *testing.T) {
	Slow(t)
	s := StartSentinel(t)
	if got := s.MasterAddr(t); got != s.Master.Addr {
		t.Fatalf("master %s, want %s", got, s.Master.Addr)
	}
	start := time.Now()
	s.Master.Kill(t)
	s.WaitPromoted(t, 20*time.Second)
	t.Logf("replica promoted %v after the kill", time.Since(start).Round(time.Millisecond))
	role, err := s.Replica.Client(t).Do(context.Background(), "ROLE").Slice()
	if err != nil || role[0] != "master" {
		t.Fatalf("ROLE of the promoted replica: %v %v", role, err)
	}
}
