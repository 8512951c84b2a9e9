// Package lua holds the Redis scripts of sluice's Redis store, embedded
// from the .lua files next to this one.
//
// Take is the script of every exact decision (Lease, in lease.lua, serves
// only the Redis store's opt-in lease mode). One EVALSHA of Take decides a
// whole Store.Take:
// it reads the clock with TIME inside Redis (never the client's clock),
// evaluates every limit against the state before the call with the exact
// integer arithmetic of ALGORITHMS.md, and writes all states (each with
// its TTL) only when every limit allows; otherwise it writes nothing but
// the penalty locks of the limits that denied.
//
// Layout, for m limits (i = 1..m, 1-based as in Lua):
//
//	KEYS[2i-1]  state key of limit i
//	KEYS[2i]    its penalty lock key: the state key + ":x"
//	ARGV[1]     n, the cost (0 peeks), at most 2^53
//	ARGV[6i-4]  algorithm code (CodeGCRA, ...)
//	ARGV[6i-3]  R, the rate
//	ARGV[6i-2]  P, the period in microseconds
//	ARGV[6i-1]  B, the burst after defaults (0 for the window algorithms)
//	ARGV[6i]    T = ceil(P/R) in microseconds (GCRA, LeakyBucket; else 0)
//	ARGV[6i+1]  L, the penalty in microseconds (0: none)
//
// The reply is a flat array of 6m integers; limit i's are at 6i-5 .. 6i:
// allowed (0 or 1), limit, remaining, retry in microseconds (RetryNever,
// -1, when the cost can never pass), reset in microseconds and delay in
// microseconds.
//
// A call of one limit without a penalty on GCRA, LeakyBucket, TokenBucket
// or FixedWindow (the common case) takes a fast path: TIME, one GET and at
// most one SET, without the general path's tables; its figures are the
// general path's, bit for bit. The lock key is then not read.
//
// All keys of one call must hash to one Redis Cluster slot; the caller
// puts them under one hash tag. Every number is sent as a decimal integer
// string. The script runs on Redis 7.0 or later and on miniredis.
package lua
