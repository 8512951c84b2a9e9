package redisstore

import (
	"strings"

	"github.com/sluicehq/sluice/lua"
)

// source returns the text of the script file name in package lua.
func source(name string) string {
	b, err := lua.FS.ReadFile(name)
	if err != nil {
		panic("redisstore: missing script " + name) // the files are embedded: a build error
	}
	return string(b)
}

// The scripts the Store runs. What several share is written once and put
// before each (see package lua): lib.lua before the take, refund, lock and
// lease scripts, lean.lua before each lean script. Each algorithm's file
// (tat.lua, token.lua, fixed.lua, sliding.lua, log.lua) holds its one
// definition of how a state answers a cost, above leanMark, and its lean
// script below: the take script runs after every algorithm's definitions,
// a lean script after lean.lua and its whole file. Each charging script
// also runs inside record.lua (recorded), as its recorded twin.
var (
	libSource     = source("lib.lua")
	leanSource    = source("lean.lua")
	takeSource    = libSource + definitions(algorithmFiles...) + source("take.lua")
	refundSource  = libSource + source("refund.lua")
	lockSource    = libSource + source("lock.lua")
	leaseSource   = libSource + source("lease.lua")
	tatSource     = leanSource + source("tat.lua") // GCRA and LeakyBucket
	tokenSource   = leanSource + source("token.lua")
	fixedSource   = leanSource + source("fixed.lua")
	slidingSource = leanSource + source("sliding.lua")
	logSource     = leanSource + source("log.lua")
	fenceSource   = source("fence.lua")
)

// algorithmFiles are the files of package lua that define an algorithm
// (one or two: tat.lua serves GCRA and LeakyBucket) and hold its lean
// script.
var algorithmFiles = []string{"tat.lua", "token.lua", "fixed.lua", "sliding.lua", "log.lua"}

// leanMark is the line of an algorithm's file where its lean script
// starts; above it, the algorithm's definitions.
const leanMark = "-- (the lean script starts here)\n"

// definitions returns the definitions of the algorithms of files: each
// file's text above leanMark.
func definitions(files ...string) string {
	var b strings.Builder
	for _, f := range files {
		defs, _, ok := strings.Cut(source(f), leanMark)
		if !ok {
			panic("redisstore: " + f + " has no " + leanMark)
		}
		b.WriteString(defs)
	}
	return b.String()
}

// recordMark is the line of record.lua where the script it wraps runs.
const recordMark = "-- (the script runs here)\n"

// recorded returns src run inside record.lua: its calls are recorded, so
// that one whose reply was lost can be sent again and settled (see
// record.go).
func recorded(src string) string {
	head, tail, ok := strings.Cut(source("record.lua"), recordMark)
	if !ok {
		panic("redisstore: record.lua has no " + recordMark)
	}
	return head + src + "\n" + tail
}

// The shape of the take script's arguments and reply (see package lua).
const (
	keysPerLimit    = 2  // state key, lock key
	argsPerLimit    = 6  // code, R, P, B, T, L
	repliesPerLimit = 6  // allowed, limit, remaining, retry, reset, delay
	retryNever      = -1 // the retry figure of a cost that can never pass
	// maxCost is the largest cost the scripts take; every limit's capacity
	// is below it, so a larger cost is sent as maxCost with the same outcome.
	maxCost = 1 << 53
	// leaseReplies is the number of integers of the lease script's reply:
	// granted, limit, remaining, retry, reset, window, window left.
	leaseReplies = 7
)

// resentArg, sent in place of a script call's cost (ARGV[1] of the take
// and lean scripts, ARGV[6] of the lease script), makes the script refuse
// the call with an error whose text starts with resentError, reading and
// writing nothing: see once.
const (
	resentArg   = "resent"
	resentError = "SLUICE re-sent call refused"
)

// Algorithm codes, the first argument of each limit.
const (
	codeGCRA          = "g"
	codeLeakyBucket   = "k"
	codeTokenBucket   = "t"
	codeFixedWindow   = "f"
	codeSlidingWindow = "w"
	codeSlidingLog    = "l"
	codeInFlight      = "i"
)
