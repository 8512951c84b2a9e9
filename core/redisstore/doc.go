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
// Make the client with UniversalOptions (or ParseURL, for a redis:// URL):
// they set what a Store needs of go-redis, no retries, the context's
// deadline bounding every call, and a prompt failure when Redis refuses
// connections:
//
//	client := redis.NewUniversalClient(redisstore.UniversalOptions("localhost:6379"))
//	store, err := redisstore.New(client, redisstore.WithPrefix("myapp:rl:"))
//
// # Retries and Cluster redirects
//
// No decision is ever charged twice, whatever the client retries. go-redis
// sends a command again after a broken connection or a timeout, when the
// first sending may have run (MaxRetries times; a ClusterClient up to
// MaxRedirects times whatever MaxRetries says; a pipeline whole). So a
// charging call's cost goes to Redis as the cost the first time the
// client writes the command, and as a mark the scripts refuse every later
// time: a re-sent call fails unrun, and the caller sees the error the
// client would have returned without retrying.
//
// The Store itself sends again only calls that did not run, and none of
// them counts against the breaker: an EVAL after NOSCRIPT and, on a
// Cluster, where it sends each call to the master that owns its slot, a
// call that met MOVED or ASK (to the master named; a MOVED that follows
// another redirect after a pause of 1 ms, doubling to 8 ms, as the masters
// may disagree on a slot's owner for a moment when a migration ends). A
// decision of several
// keys (a limit with a penalty: its state and its lock, which exists only
// while it holds; several limits) meets TRYAGAIN while its slot migrates
// and one of its keys is on one side only, which for a slot of many keys
// can outlast any deadline. The Store then decides it again one key at a
// time, with calls that each run where their key is: it reads the locks,
// charges each limit until one denies, gives back what the earlier ones
// took and sets the locks of those that denied. Each charge is atomic in its
// key, so no limit admits more than it allows; but the decision as a whole
// is not: units taken and given back may deny another decision meanwhile,
// and a lock set between a decision's reading of the locks and its
// charges does not stop it. Under load, no error reaches a caller while
// redis-cli --cluster reshard moves slots of 300 keys
// (TestFaultClusterReshard) nor while slots stay half moved for 2 s
// (TestFaultClusterSlotHeldMidMigration). A Charge (core.WithCountIf)
// goes the same way, its stamp the earliest of its calls', and a Refund of
// several limits gives back one limit at a time. An InFlight limit's call
// takes the decision's slot, and frees it when another limit denies. Only
// a decision with two InFlight limits keeps its one call, as one slot id
// serves both: the Store sends it again after 1 ms, doubling to 8 ms,
// until the context's deadline, and a slot slower to move fails it (the
// failure policy decides). A limit without a penalty sends its state key
// in the lock's place, so that no missing lock key causes TRYAGAIN. A
// charge that the Store records for a while after a lost reply adds a key
// of its own, new, which a migrating master never holds: on TRYAGAIN it
// is sent unrecorded, and decided as above.
//
// # Keys
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
// # Failures, breakers and start-up checks
//
// Every call to Redis has the Store's deadline (WithTimeout, 100 ms by
// default). A Store keeps a circuit breaker per Redis server (per master of
// a Cluster), shared by every core.Limiter on it (WithBreaker): while a
// server is failing, decisions, give-backs and releases of its keys fail
// at once with an error wrapping store.ErrBreakerOpen. When a call fails (an error, the deadline,
// an open breaker), the Store's local fallback decides (WithFallback; on by
// default, a memory store): from Redis' last answer for the key, within
// this process's share of it, charging Redis with what it admitted once
// Redis answers again; its Results say so in Result.Fallback. A call of a
// core.Limiter under FailOpen or FailClosed (its context says so), or a
// Store without a fallback, returns the error instead.
//
// Ping checks, at start-up, that Redis accepts the client's settings and
// that its user has every permission the Store needs (MinimalACL is the
// ready ACL SETUSER line), that Redis accepts a write, and that no breaker
// has been open for more than 10 s: it serves as a health check. The Store
// logs, with slog.Default() at level Warn and once per episode, what makes
// the limit say something other than Redis would: a maxmemory-policy that
// evicts (use noeviction, or a Redis of its own), keys evicted (it looks
// every few seconds), a restart (use AOF when penalties must survive one),
// a user Redis refuses, a fleet it cannot count, a breaker opening, and the
// first local decision of an outage. Stats returns the same facts for
// metrics (promlimit.WithStoreStats). An OOM reply fails the call with an
// error wrapping store.ErrOutOfMemory.
//
// A Store subscribes to its reset channel (with the fallback, the deny
// cache or lease mode on) and counts the Stores subscribed to it, one per
// process, for the fallback's shares: make one Store per process per Redis
// and prefix, and share it among the Limiters. Close stops what it runs in
// the background; the Redis client is the caller's to close after it.
//
// Automatic pipelining (WithPipelining, on by default) sends concurrent
// Takes together, one round trip for all, those of one algorithm family
// on one slot as one script call, and changes no Result. The deny
// cache (WithDenyCache, off by default; its limits are listed there)
// answers repeated denials in process. Lease mode (WithLeases, off by
// default) is the one option that trades exactness for throughput: a key
// one process takes very often is decided locally from a lease, within
// the bound WithLeases states; cold keys and every other Take stay exact.
//
// Redis 7.0 or later is required. miniredis works too, for tests that move
// time: move miniredis' TIME (SetTime) and its key expiry (FastForward)
// together, and leave WithDenyCache off (see the example). Ping skips its
// memory check there (miniredis knows no script shebang).
package redisstore
