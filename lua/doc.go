// Package lua holds the Redis scripts of sluice's Redis store, one .lua
// file each, embedded in FS. core/redisstore assembles and runs them; this
// package has no other API, and the scripts' arguments and replies change
// with the store.
//
// take.lua, the general script, decides any exact Store.Take (lease.lua
// serves only the Redis store's opt-in lease mode; refund.lua gives a
// charge back): it reads the clock with TIME inside Redis (never the client's clock), evaluates every limit
// against the state before the call with the exact integer arithmetic of
// ALGORITHMS.md, and writes all states (each with its TTL) only when every
// limit allows; otherwise it writes nothing but the penalty locks of the
// limits that denied.
//
// Each algorithm's file (tat.lua for GCRA and LeakyBucket, token.lua,
// fixed.lua, sliding.lua, log.lua, inflight.lua) holds its one Lua
// definition of how its state answers a cost, in three parts cut at two
// marker lines: the functions that decide and charge (put before the
// general scripts, take.lua, refund.lua and lease.lua, and before its lean
// script); the general scripts' part (put before those three only): its
// give-backs and its entry in ALG (lib.lua), the table through which
// take.lua and refund.lua dispatch by algorithm code (how to read its
// state, take a cost, give one back); and its lean script (inflight.lua
// has none). Every function a script defines is a closure built on each
// call, and one that captures another local function costs an upvalue
// too: a lean script gets only its algorithm's definitions, and those it
// calls call no other; the general scripts run an algorithm's definitions
// only when a call names it (lib.lua's alg and define).
//
// The lean scripts decide a Take of one
// limit without a penalty, the common call, by the same arithmetic and on
// the same state, key and format as Take, so that a limit may be charged
// by either: KEYS[1] is the state key, ARGV the cost and the few sizes the
// algorithm needs, and the reply the smallest from which the caller derives
// every figure (one integer for TAT and Token, and for Fixed when exact and
// Log's usual admission; two or three otherwise; see each script's header).
// The sign of the first integer is the verdict: x >= 0 allowed, -x-1
// denied (Fixed's packed integer has its own form, in fixed.lua).
//
// Each algorithm's lean part is the body of lean.lua's function lean(key,
// ARGV, o, pre, n), which two drivers run: the lean script, once, and the
// batch script, for many calls of that lean script and one limit at one
// reading of the clock (KEYS[i] call i's key; ARGV the limit's arguments
// after the cost, once, then each call's cost in turn), in order (a state kept in a string read for all keys with one MGET, see
// lean.lua), each in a pcall: its reply holds at i call i's reply, or as a
// string the text of the error call i met, so that one call's error
// leaves the others decided (entry, batch.lua). take.lua's body is a
// function too, take(ko, nk, ao, na), the call whose keys are KEYS[ko +
// 1] .. KEYS[ko + nk] and arguments ARGV[ao + 1] .. ARGV[ao + na]: the
// take script runs it once on all of KEYS and ARGV, its batch script once
// per call (KEYS: each call's keys in turn; ARGV: per call, its number of
// keys and of arguments, then its arguments), at one reading of the clock,
// with the same entries. On a Cluster, a batch's keys share one slot.
//
// What several scripts share is written once and put before each of them,
// so that every script Redis runs is still one program: lib.lua (number
// formatting, exact division, PX, the state pattern, a calendar window,
// and the table ALG through which the general scripts dispatch) before
// take.lua, refund.lua, lock.lua and lease.lua, and lean.lua (Redis'
// clock, the cost, the function lean and its drivers) around each lean
// part.
//
// take.lua's layout, for m limits (i = 1..m, 1-based as in Lua):
//
//	KEYS[2i-1]  state key of limit i
//	KEYS[2i]    its penalty lock key: the state key + ":x" (read only when
//	            L > 0; the Redis store sends the state key again when L is
//	            0, as a key missing during a Cluster slot migration would
//	            be answered TRYAGAIN)
//	ARGV[1]     n, the cost (0 peeks), at most 2^53
//	ARGV[6i-4]  algorithm code ("g" GCRA, "k" leaky bucket, "t" token bucket, "f" fixed window, "w" sliding window, "l" sliding log, "i" in flight)
//	ARGV[6i-3]  R, the rate
//	ARGV[6i-2]  P, the period in microseconds
//	ARGV[6i-1]  B, the burst after defaults (0 for the window algorithms)
//	ARGV[6i]    T = ceil(P/R) in microseconds (GCRA, LeakyBucket; else 0)
//	ARGV[6i+1]  L, the penalty in microseconds (0: none)
//
// The reply is a flat array of 4m integers; limit i's are at 4i-3 .. 4i:
// its algorithm's reply to the cost, three integers in the shape of its
// lean script's reply (unpacked; InFlight's as SlidingLog's: the count,
// reset and retry), the first < 0 when it denies, and how long the
// limit's penalty lock still holds in microseconds (0: none; then the
// three are a peek's). A limit that allows a call another limit denies
// replies as a peek does, since nothing is charged. The caller derives the
// figures (limit, remaining, retry, reset, delay) with the same decoders
// as a lean script's reply, and applies the penalty. When some limit is
// InFlight, one more integer follows: the id of the slot the call took (0:
// none). One more argument after the last limit's, "s", makes the reply
// end with one more integer: Redis' clock at the call in microseconds,
// which Refund takes back (the Redis store's Charge).
//
// Refund (refund.lua) gives back what such a call charged, for every limit
// of one key in one call: KEYS the state keys, ARGV n, that clock reading,
// and each limit's six arguments as in Take (see its header and
// ALGORITHMS.md, "Giving back a charge").
//
// Lock (lock.lua) reads one penalty lock, and sets it when asked and none
// holds, as Take does with KEYS[2i]: with it and Take on one key at a time
// (each state key sent as its own lock, L = 0), the Redis store decides a
// Take whose keys a Cluster slot migration has split between two nodes.
//
// A cost of "resent" (not a number) is refused with an error, before the
// script reads or writes anything (in a batch, for that call): the caller
// sends it in place of the cost when the client library sends a call
// again by itself.
//
// All keys of one call must hash to one Redis Cluster slot; the caller
// puts them under one hash tag. Every number is sent as a decimal integer
// string, and every cost may be negative: -n decides n exactly as n would
// and writes nothing (a dry run). The scripts run on Redis 7.0 or later and
// on miniredis.
package lua
