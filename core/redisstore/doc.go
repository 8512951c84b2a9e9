// Package redisstore implements core.Store on Redis, so that every
// instance of a service shares one allowance per client.
//
// Each Take is a single EVALSHA of the script in package lua (falling back
// to EVAL when Redis has lost the script, never inside MULTI). The script
// reads Redis' own clock with TIME, so app servers with skewed clocks
// agree; it decides every limit of the call with the exact integer
// arithmetic of ALGORITHMS.md (the same as the memory store), and sets a
// TTL on every key it writes, so idle keys disappear on their own.
//
// Keys have the form
//
//	<prefix>{<tag>}:<limit id>        state
//	<prefix>{<tag>}:<limit id>:x      penalty lock
//
// where tag is "=" + the key when the key is 1 to 64 bytes of
// [A-Za-z0-9._:@/-], and "#" + 32 hex digits of its SHA-256 otherwise. The
// braces make every key of one Take hash to one Redis Cluster slot (no
// CROSSSLOT), user content can never pick the slot or break out of the tag,
// and no Redis key grows past about 220 bytes however long the user key.
//
// Two things, both on by default, cut what Redis sees. The deny cache
// (WithDenyCache) answers in process a Take that Redis has denied until a
// known time, with the figures Redis would give, so a flood on an
// exhausted key costs Redis one script call per RetryAfter. Automatic
// pipelining (WithPipelining) sends a Take at once when the Store is idle
// and, while its requests are in flight, queues concurrent Takes and sends
// them together as one pipeline of EVALSHAs, one round trip for all.
//
// Redis 7.0 or later is required; miniredis works too, which makes tests
// easy (see the example).
package redisstore
