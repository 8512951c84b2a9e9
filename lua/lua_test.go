package lua_test

import (
	"context"
	"regexp"
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/lua"
)

// Guards on the source for rules no single run can show.
func TestTakeSourceRules(t *testing.T) {
	code := regexp.MustCompile(`(?m)--.*$`).ReplaceAllString(lua.Take, "") // drop comments
	for _, bad := range []struct{ token, why string }{
		{"//", "Lua 5.3 integer division: Redis runs Lua 5.1"},
		{"math.floor", "inexact on large operands; use fdiv/cdiv"},
		{"'EXPIRE'", "use PX / PEXPIRE in milliseconds"},
		{"'INCR", "counters are written with SET ... PX"},
	} {
		if strings.Contains(code, bad.token) {
			t.Errorf("script uses %s: %s", bad.token, bad.why)
		}
	}
	// tostring writes 1.8e+15: only the error for an unknown algorithm may use it.
	if n := strings.Count(code, "tostring("); n != 1 || !strings.Contains(code, "' .. tostring(a))") {
		t.Errorf("script uses tostring %d times; numbers must go through str", n)
	}
	if n := strings.Count(code, "call('TIME')"); n != 1 {
		t.Errorf("script reads TIME %d times, want once", n)
	}
	// Every SET carries its TTL; every ZADD is followed by a PEXPIRE.
	for _, line := range strings.Split(code, "\n") {
		if strings.Contains(line, "call('SET'") && !strings.Contains(line, "'PX'") {
			t.Errorf("SET without PX: %s", strings.TrimSpace(line))
		}
	}
	if z, p := strings.Index(code, "call('ZADD'"), strings.Index(code, "call('PEXPIRE'"); z < 0 || p < z {
		t.Error("ZADD not followed by PEXPIRE")
	}
}

func TestTakeRejectsBadLayout(t *testing.T) {
	m := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer client.Close()
	ctx := context.Background()
	for _, c := range []struct {
		keys []string
		args []any
	}{
		{[]string{"a"}, []any{"1", "g", "1", "1", "1", "1", "0"}},             // one key
		{[]string{"a", "a:x"}, []any{"1", "g", "1", "1", "1", "1"}},           // five limit arguments
		{[]string{"a", "a:x"}, []any{"1", "g", "1", "1", "1", "1", "0", "x"}}, // one too many
	} {
		err := client.Eval(ctx, lua.Take, c.keys, c.args...).Err()
		if err == nil || !strings.Contains(err.Error(), "want 2 keys and 6 arguments per limit") {
			t.Errorf("keys %v args %v: error %v", c.keys, c.args, err)
		}
	}
	if keys := m.Keys(); len(keys) != 0 {
		t.Errorf("a rejected call wrote %v", keys)
	}
}
