package redisstore

import (
	"context"
	"regexp"
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// The lease script follows the take script's rules.
func TestLeaseSourceRules(t *testing.T) {
	code := regexp.MustCompile(`(?m)--.*$`).ReplaceAllString(leaseSource, "")
	for _, bad := range []string{"//", "math.floor", "'EXPIRE'", "'INCR", "tostring("} {
		if strings.Contains(code, bad) {
			t.Errorf("lease script uses %s", bad)
		}
	}
	if n := strings.Count(code, "call('TIME')"); n != 1 {
		t.Errorf("lease script reads TIME %d times, want once", n)
	}
	for _, line := range strings.Split(code, "\n") {
		if strings.Contains(line, "call('SET'") && !strings.Contains(line, "'PX'") && !strings.Contains(line, "'KEEPTTL'") {
			t.Errorf("SET without PX: %s", strings.TrimSpace(line))
		}
	}
}

func TestLeaseRejectsBadCalls(t *testing.T) {
	m := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer client.Close()
	ctx := context.Background()
	ok := []any{codeGCRA, "1", "1000000", "1", "1000000", "1", "1", "0", "0"}
	for _, c := range []struct {
		keys []string
		args []any
		want string
	}{
		{[]string{"a", "b"}, ok, "want 1 key and 9 arguments"},
		{[]string{"a"}, ok[:8], "want 1 key and 9 arguments"},
		{[]string{"a"}, append([]any{codeLeakyBucket}, ok[1:]...), "is not leased"},
		{[]string{"a"}, append([]any{codeSlidingLog}, ok[1:]...), "is not leased"},
	} {
		err := client.Eval(ctx, leaseSource, c.keys, c.args...).Err()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("keys %v args %v: error %v, want %q", c.keys, c.args, err, c.want)
		}
	}
	if keys := m.Keys(); len(keys) != 0 {
		t.Errorf("a rejected call wrote %v", keys)
	}
}
