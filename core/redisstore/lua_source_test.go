package redisstore

import (
	"context"
	"regexp"
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redistest"
)

// Guards on the source for rules no single run can show.
func TestTakeSourceRules(t *testing.T) {
	code := regexp.MustCompile(`(?m)--.*$`).ReplaceAllString(takeSource, "") // drop comments
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
		if strings.Contains(line, "call('SET'") && !strings.Contains(line, "'PX'") && !strings.Contains(line, "'KEEPTTL'") {
			t.Errorf("SET without PX: %s", strings.TrimSpace(line))
		}
	}
	if z, p := strings.Index(code, "call('ZADD'"), strings.LastIndex(code, "pexpire("); z < 0 || p < z {
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
		err := client.Eval(ctx, takeSource, c.keys, c.args...).Err()
		if err == nil || !strings.Contains(err.Error(), "want 2 keys and 6 arguments per limit") {
			t.Errorf("keys %v args %v: error %v", c.keys, c.args, err)
		}
	}
	if keys := m.Keys(); len(keys) != 0 {
		t.Errorf("a rejected call wrote %v", keys)
	}
}

// Every charging script refuses a call whose cost is resentArg, with
// resentError, and writes nothing.
func TestResentRefused(t *testing.T) {
	m := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer client.Close()
	ctx := context.Background()
	for _, c := range []struct {
		name, src string
		keys      []string
		args      []any
	}{
		{"take", takeSource, []string{"a", "a:x"}, []any{resentArg, "g", "1", "1000000", "1", "1000000", "0"}},
		{"tat", tatSource, []string{"a"}, []any{resentArg, "1", "1000000"}},
		{"token", tokenSource, []string{"a"}, []any{resentArg, "1", "1000000", "1"}},
		{"fixed", fixedSource, []string{"a"}, []any{resentArg, "1", "1000000"}},
		{"sliding", slidingSource, []string{"a"}, []any{resentArg, "1", "1000000"}},
		{"log", logSource, []string{"a"}, []any{resentArg, "1", "1000000", "1000"}},
		{"lease", leaseSource, []string{"a"}, []any{"g", "1", "1000000", "1", "1000000", resentArg, "1", "0", "0"}},
	} {
		err := client.Eval(ctx, c.src, c.keys, c.args...).Err()
		if err == nil || !strings.HasPrefix(err.Error(), resentError) {
			t.Errorf("%s: error %v, want %q", c.name, err, resentError)
		}
		if keys := m.Keys(); len(keys) != 0 {
			t.Errorf("%s: a refused call wrote %v", c.name, keys)
		}
		// The same call with a cost runs and writes.
		args := append([]any(nil), c.args...)
		for i, a := range args {
			if a == resentArg {
				args[i] = "1"
			}
		}
		if err := client.Eval(ctx, c.src, c.keys, args...).Err(); err != nil {
			t.Errorf("%s with a cost: %v", c.name, err)
		}
		if keys := m.Keys(); len(keys) == 0 {
			t.Errorf("%s with a cost wrote nothing", c.name)
		}
		m.FlushAll()
	}
}

// The general scripts build an algorithm's definitions only when a call
// names it: every algorithm file's text is inside lib.lua's define (a
// branch per file, taken for the codes whose ALG entries it fills), and a
// code no branch takes is refused, on Redis' Lua as on miniredis'.
func TestGeneralScriptsDefineOnDemand(t *testing.T) {
	for name, src := range map[string]string{"take": takeSource, "refund": refundSource, "lease": leaseSource} {
		open := strings.Index(src, "define = function(a)\n")
		if open < 0 {
			t.Fatalf("%s: no define", name)
		}
		for _, f := range algorithmFiles {
			defs, gives, _ := algorithm(f)
			if i := strings.Index(src, defs+gives); i < open {
				t.Errorf("%s: %s's definitions are not inside define (at %d, define at %d)", name, f, i, open)
			}
			for _, c := range algEntry.FindAllStringSubmatch(gives, -1) {
				if !strings.Contains(src, "a == '"+c[1]+"'") {
					t.Errorf("%s: no branch of define takes code %q (%s)", name, c[1], f)
				}
			}
		}
	}
	m := miniredis.RunT(t)
	srv := redistest.StartServer(t)
	for _, addr := range []string{m.Addr(), srv.Addr} {
		client := redis.NewClient(&redis.Options{Addr: addr})
		err := client.Eval(context.Background(), takeSource, []string{"a", "a"}, "1", "z", "1", "1000000", "0", "0", "0").Err()
		if err == nil || !strings.Contains(err.Error(), "unknown algorithm z") {
			t.Errorf("%s: take with algorithm code z: %v, want the unknown algorithm's error", addr, err)
		}
		if n := client.Exists(context.Background(), "a").Val(); n != 0 {
			t.Errorf("%s: the refused call wrote its key", addr)
		}
		_ = client.Close()
	}
}
