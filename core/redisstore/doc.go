// Package redisstore implements store.Store on Redis, so that every
// instance of a service shares one allowance per client.
//
// Each Take is a single EVALSHA of a script in package lua (falling back
// to EVAL when Redis has lost it, and then loading every script again;
// never inside MULTI): the lean script of its algorithm's family for one
// limit without a penalty, the take script for several limits or a
// penalty. Both read and write the same state format in the same keys.
// The script reads Redis' own clock with TIME, so app servers with skewed
// clocks agree; it decides every limit of the call with the exact integer
// arithmetic of ALGORITHMS.md (the same as the memory store), and sets a
// TTL on every key it writes, so idle keys disappear on their own.
//
// No decision is ever charged twice, whatever the client retries: a
// charging call's cost goes to Redis as the cost the first time the client
// writes the command and as a mark the scripts refuse every later time, so
// a call that go-redis sends again on its own (after a broken connection
// or a timeout, when the first sending may have run) fails unrun. This was
// chosen over making a replayed call return a recorded result: recording
// each call's result under its own key with a short TTL, so that a replay
// finds it, took the lean GCRA script from 9.7 to 18.1 µs of Redis time
// per call (INFO commandstats, 8 connections, pipelines of 16, on a
// shared machine at load 15: the ratio is what counts), and the records'
// memory grows with the decision rate times the TTL; the mark costs one
// comparison in the script (no change measurable) and no Redis memory. A
// replayed call then fails instead of returning its first result: the
// caller sees the error the client would have returned without retrying.
// On a Cluster the Store sends each call to the master that owns its
// slot, and follows MOVED and ASK and sends again after TRYAGAIN itself,
// since those replies mean the script did not run; they never count
// against the breaker.
//
// A decision of several keys (a limit with a penalty: its state and lock;
// several limits) answers TRYAGAIN while its slot migrates and one of its
// keys exists on one side only; the Store sends it again, after 1 to 8 ms,
// until the context's deadline, so a slot that moves within the deadline
// costs no decision an error (TestFaultClusterReshard: 1000 other keys
// per slot, redis-cli --cluster reshard under load), and one that takes
// longer fails such decisions, which then follow the failure policy. A
// limit without a penalty sends its state key in the lock's place, so
// that no missing lock key causes TRYAGAIN.
//
// Make the client with UniversalOptions (or ParseURL, for a redis:// URL):
// they set what a Store needs of go-redis, no retries (a re-sent call would
// be refused), the context's deadline bounding every call, and a prompt
// failure when Redis refuses connections:
//
//	client := redis.NewUniversalClient(redisstore.UniversalOptions("localhost:6379"))
//	store, err := redisstore.New(client, redisstore.WithPrefix("myapp:rl:"))
//
// Keys have the form
//
//	<prefix>{<tag>}:<limit id>        state (a string; a sorted set for sliding_log and in_flight)
//	<prefix>{<tag>}:<limit id>:h      state of a fixed_window (a hash: window → count)
//	<prefix>{<tag>}:<state>:x         penalty lock (only while one holds)
//
// where prefix is "sluice:" unless WithPrefix says otherwise; tag is "=" +
// the key when the key is 1 to 64 bytes of [A-Za-z0-9._:@/-], and "#" + 32
// hex digits of its SHA-256 otherwise; and limit id is store.Spec.ID
// (algorithm, rate, period, burst and penalty in µs). The key a
// core.Limiter passes is "<len(name)>:<name>:<client key>", so the client
// "alice" of a Limiter named "api" under a 100/m GCRA limit is
// sluice:{=3:api:alice}:g100/60000000b100p0. The braces make every key of
// one Take hash to one Redis Cluster slot (no CROSSSLOT), user content can
// never pick the slot or break out of the tag, and no Redis key grows past
// about 220 bytes however long the user key. Resets are announced on the
// Pub/Sub channel <prefix>reset. Use core.Limiter.Reset (or Store.Reset)
// rather than deleting keys by hand: it also clears what processes keep
// locally.
//
// A Store keeps a circuit breaker per Redis server (per master of a
// Cluster), shared by every core.Limiter on it (WithBreaker): a server
// that refuses connections, keeps failing or stops answering (not one
// slow call) is left alone, and Takes of its keys fail at once with an
// error wrapping store.ErrBreakerOpen, so the Limiters' failure policy
// decides without waiting. The Store probes it in the background with a
// script call and reloads its scripts before traffic resumes. Ping checks,
// at start-up, that Redis accepts the client's settings and that its
// user has every permission the Store needs (MinimalACL is the ready
// ACL SETUSER line), and warns (WithWarnings) when Redis may lose the
// Store's state: a maxmemory-policy that evicts (use noeviction, or a Redis
// of its own) and a restart (use AOF when penalties must survive one). An
// OOM reply fails the Take with an error wrapping store.ErrOutOfMemory.
//
// Automatic pipelining (WithPipelining, on by default) sends a Take at once
// when the Store is idle and, while its requests are in flight, queues
// concurrent Takes and sends them together as one pipeline of EVALSHAs, one
// round trip for all. The deny cache (WithDenyCache, off by default)
// answers in process a Take that Redis has denied until a known time, with
// the figures Redis would give, so a flood on an exhausted key costs Redis
// one script call per RetryAfter.
//
// Lease mode (WithLeases, off by default) is the one option that trades
// exactness for throughput: a key one process takes very often is decided
// locally from a lease, a share of its allowance charged in Redis in one
// call (lua/lease.lua) and given back when unused, within the bound
// WithLeases documents. Cold keys and every other Take stay exact.
//
// Redis 7.0 or later is required. miniredis works too, for tests that move
// time: keep the deny cache off there, and move miniredis' TIME (SetTime)
// and its key expiry (FastForward) together (see the example).
package redisstore
