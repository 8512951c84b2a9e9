package redisstore

import (
	"regexp"
	"strings"
	"testing"
)

// Guards on the lean scripts' source, as TestTakeSourceRules on take's.
func TestLeanSourceRules(t *testing.T) {
	for name, src := range map[string]string{"tat": tatSource, "token": tokenSource, "fixed": fixedSource, "sliding": slidingSource, "log": logSource} {
		for _, part := range []string{"-- KEYS[1]", "-- ARGV", "-- Reply"} {
			if !strings.Contains(src, part) {
				t.Errorf("%s: header without %q", name, part)
			}
		}
		comments := regexp.MustCompile(`(?m)--.*$`)
		code := comments.ReplaceAllString(src, "")
		// Only the algorithm's definitions build closures on every call;
		// the lean script below them builds none.
		_, lean, ok := strings.Cut(src, leanMark)
		if !ok {
			t.Fatalf("%s: no lean mark", name)
		}
		if strings.Contains(comments.ReplaceAllString(lean, ""), "function") {
			t.Errorf("%s: the lean script builds a closure on every call", name)
		}
		for _, bad := range []struct{ token, why string }{
			{"//", "Lua 5.3 integer division: Redis runs Lua 5.1"},
			{"math.floor", "inexact on large operands; use fmod"},
			{"'EXPIRE'", "use PX / PEXPIRE in milliseconds"},
			{"tostring(", "writes 1.8e+15; pass numbers to redis.call or use '%d'"},
			{"..", "concatenating a number writes 1.8e+15; use string.format('%d')"},
			{"KEYS[2]", "one key"},
		} {
			if strings.Contains(code, bad.token) {
				t.Errorf("%s uses %s: %s", name, bad.token, bad.why)
			}
		}
		if n := strings.Count(code, "redis.call('TIME')"); n != 1 {
			t.Errorf("%s reads TIME %d times, want once", name, n)
		}
		for _, line := range strings.Split(code, "\n") {
			if strings.Contains(line, "call('SET'") && !strings.Contains(line, "'PX'") && !strings.Contains(line, "'KEEPTTL'") {
				t.Errorf("%s: SET without PX: %s", name, strings.TrimSpace(line))
			}
		}
		for _, write := range []string{"call('ZADD'", "call('HSET'"} {
			if z, p := strings.Index(code, write), strings.LastIndex(code, "'PEXPIRE'"); z >= 0 && p < z {
				t.Errorf("%s: %s) not followed by PEXPIRE", name, write)
			}
		}
	}
}
