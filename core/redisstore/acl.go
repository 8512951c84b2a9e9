package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// MinimalACL is the ACL SETUSER rule list of a Redis user with every
// permission a Store under the default prefix, "sluice:", needs and no
// other: its scripts' commands on keys under the prefix, EVAL and EVALSHA
// (SCRIPT LOAD is optional: without it the scripts are sent by EVAL when
// Redis lacks them), DEL and PUBLISH for Reset, SUBSCRIBE to the reset
// channel and PUBSUB NUMSUB on it (the fleet count of the fallback's
// share), INFO (optional: without it Ping cannot warn of eviction and
// restarts, and says so), HELLO, and, for a Cluster client, ASKING,
// CLUSTER SLOTS and SHARDS, and COMMAND (go-redis' ClusterClient reads
// it). Replace the password, and the prefix in ~sluice:* and
// &sluice:reset when WithPrefix gives another. For example, in redis-cli:
//
//	ACL SETUSER sluice on >password resetkeys ~sluice:* resetchannels &sluice:reset -@all +ping +hello +eval +evalsha +script|load +time +get +set +mget +del +hget +hset +hincrby +hdel +hkeys +hlen +pexpire +zadd +zcount +zrange +zrangebyscore +zremrangebyrank +zrem +zscore +publish +subscribe +pubsub|numsub +info +asking +cluster|slots +cluster|shards +command
//
// Ping checks every one of them (but HELLO, which go-redis sends when it
// connects, and the Cluster's) and fails naming each one missing. (On
// Redis 7.2 and later go-redis also sends CLIENT SETINFO, and goes on
// when it is refused.)
const MinimalACL = "on >password resetkeys ~sluice:* resetchannels &sluice:reset -@all " +
	"+ping +hello +eval +evalsha +script|load +time +get +set +mget +del " +
	"+hget +hset +hincrby +hdel +hkeys +hlen +pexpire +zadd +zcount +zrange +zrangebyscore " +
	"+zremrangebyrank +zrem +zscore +publish +subscribe +pubsub|numsub +info +asking +cluster|slots +cluster|shards +command"

// ErrPermission is wrapped by the error Ping returns when the Redis user
// lacks a permission the Store needs (see MinimalACL).
var ErrPermission = errors.New("redisstore: the Redis user lacks a permission the Store needs")

// aclScript checks, with redis.acl_check_cmd (Redis 7.0), whether the
// calling user may run each command of ARGV (its words separated by
// newlines) and returns the indexes (1-based) of those it may not: -1
// where Redis has no acl_check_cmd (miniredis), an index negated for a
// command the check itself refused.
const aclScript = `if not redis.acl_check_cmd then return -1 end
local out = {}
for i = 1, #ARGV do
  local a = {}
  for w in string.gmatch(ARGV[i], '[^\n]+') do a[#a + 1] = w end
  local ok, r = pcall(redis.acl_check_cmd, unpack(a))
  if not ok then out[#out + 1] = -i elseif not r then out[#out + 1] = i end
end
return out`

// needs returns what Ping checks: each command the Store sends or its
// scripts call, with sample keys and the channel under the prefix, and
// why the Store needs it.
func (s *Store) needs() [][2]string {
	k := s.prefix + "{=ping}:g1/1000000b1p0"
	x, h, ch := k+":x", k+":h", s.prefix+resetChannel
	sha := takeScript.sha.(string)
	return [][2]string{
		{"EVALSHA " + sha + " 2 " + k + " " + x, "every Take"},
		{"EVAL return 2 " + k + " " + x, "a Take when Redis lost the scripts"},
		{"TIME", "the scripts read Redis' clock"},
		{"GET " + k, "the scripts"}, {"MGET " + k + " " + x, "the scripts"},
		{"SET " + k + " 1 PX 1", "the scripts"}, {"DEL " + k + " " + x, "Reset and lease mode"},
		{"HGET " + h + " 1", "fixed_window"}, {"HSET " + h + " 1 1", "fixed_window"},
		{"HINCRBY " + h + " 1 1", "fixed_window"}, {"HDEL " + h + " 1", "fixed_window"},
		{"HKEYS " + h, "fixed_window"}, {"HLEN " + h, "fixed_window"},
		{"PEXPIRE " + h + " 1", "fixed_window and sliding_log TTLs"},
		{"ZADD " + k + " 1 m", "sliding_log"}, {"ZCOUNT " + k + " 0 1", "sliding_log"},
		{"ZRANGE " + k + " 0 1 WITHSCORES", "sliding_log"},
		{"ZRANGEBYSCORE " + k + " 0 1", "sliding_log"},
		{"ZREMRANGEBYRANK " + k + " 0 1", "sliding_log"}, {"ZSCORE " + k + " m", "sliding_log"},
		{"ZREM " + k + " m", "sliding_log's give-back (core.WithCountIf)"},
		{"PUBLISH " + ch + " x", "Reset's announcement"},
		{"SUBSCRIBE " + ch, "hearing resets (the fallback, the deny cache, leases)"},
		{"PUBSUB NUMSUB " + ch, "the fleet count: each process's share while Redis is away"},
		{"PING", "Ping and the breakers' probes"},
	}
}

// checkACL fails, wrapping ErrPermission, when the client's user lacks a
// permission the Store needs on any server (every master of a Cluster),
// naming each one missing. It reports whether SCRIPT LOAD and INFO are
// permitted; both are when Redis cannot tell (miniredis).
func (s *Store) checkACL(ctx context.Context) (load, info bool, err error) {
	needs := s.needs()
	needs = append(needs, [2]string{"SCRIPT LOAD return", ""}, [2]string{"INFO server", ""})
	args := make([]any, 0, 3+len(needs))
	args = append(args, "eval", aclScript, 0)
	for _, n := range needs {
		args = append(args, strings.ReplaceAll(n[0], " ", "\n"))
	}
	load, info = true, true
	err = forEachServer(ctx, s.client, func(ctx context.Context, c *redis.Client) error {
		v, err := c.Do(ctx, args...).Result()
		if err != nil {
			if redis.HasErrorPrefix(err, "NOPERM") {
				return fmt.Errorf("%w: EVAL (every check and a Take when Redis lost the scripts): %w", ErrPermission, err)
			}
			return fmt.Errorf("redisstore: checking the Redis user's permissions: %w", err)
		}
		var missing []string
		idx, _ := v.([]any)
		for _, x := range idx {
			i, _ := x.(int64)
			switch n := needs[max(i, -i)-1]; {
			case n[1] == "" && strings.HasPrefix(n[0], "SCRIPT"):
				load = false
			case n[1] == "":
				info = false
			case i < 0:
				missing = append(missing, fmt.Sprintf("%s (for %s: Redis could not check it)", n[0], n[1]))
			default:
				missing = append(missing, fmt.Sprintf("%s (for %s)%s", n[0], n[1], dryRun(ctx, c, n[0])))
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("%w on %s: %s", ErrPermission, c.Options().Addr, strings.Join(missing, "; "))
		}
		return nil
	})
	return load, info, err
}

// dryRun returns ACL DRYRUN's reason why the client's user may not run
// cmd (the command, a key or a channel), or a note that the user may not
// ask.
func dryRun(ctx context.Context, c *redis.Client, cmd string) string {
	user, err := c.Do(ctx, "acl", "whoami").Text()
	if err != nil {
		return ""
	}
	args := []any{"acl", "dryrun", user}
	for _, w := range strings.Fields(cmd) {
		args = append(args, w)
	}
	why, err := c.Do(ctx, args...).Text()
	if err != nil || why == "OK" {
		return ""
	}
	return ": " + why
}

// forEachServer calls f with client, or with each master of a Cluster
// client or each shard of a Ring, and returns the first error.
func forEachServer(ctx context.Context, client redis.UniversalClient, f func(context.Context, *redis.Client) error) error {
	switch c := client.(type) {
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, f)
	case *redis.Ring:
		return c.ForEachShard(ctx, f)
	case *redis.Client:
		return f(ctx, c)
	}
	return nil
}
