package redisstore

import (
	"context"
	"testing"
)

func TestClusterReloadIsThrottled(t *testing.T) {
	calls := 0
	c := &clusterReload{reload: func(context.Context) { calls++ }}
	for _, step := range []struct {
		now  int64
		want int
	}{
		{1_000_000, 1},                          // first failure: reload
		{1_000_001, 1},                          // right after: no
		{1_000_000 + clusterReloadEvery - 1, 1}, // still inside the interval
		{1_000_000 + clusterReloadEvery, 2},     // interval over
		{5_000_000, 3},
	} {
		c.kick(step.now)
		if calls != step.want {
			t.Fatalf("after kick(%d): %d reloads, want %d", step.now, calls, step.want)
		}
	}
}
