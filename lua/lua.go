package lua

import _ "embed" // for the scripts

// Take is the source of the general take script: any number of limits,
// penalties included. See the package documentation for its KEYS, ARGV and
// reply.
var Take = lib + take

// lib holds the helpers the take and lease scripts share; each script's
// source is lib followed by its own text.
//
//go:embed lib.lua
var lib string

//go:embed take.lua
var take string

// Refund is the source of the refund script: give back what a take made
// at a stamp charged (see its header in refund.lua).
var Refund = lib + refund

//go:embed refund.lua
var refund string

// Lock is the source of the lock script: read, and when asked set, one
// penalty lock alone (see its header in lock.lua), for a Take decided one
// key at a time while a Cluster slot migrates.
var Lock = lib + lock

//go:embed lock.lua
var lock string

// The lean scripts: one limit without a penalty, of one algorithm family
// each. Each one's header (in its .lua file) gives its KEYS, ARGV and
// reply; each source is lean.lua's shared start followed by the family's
// own text.
var (
	TAT     = lean + tat     // GCRA and LeakyBucket
	Token   = lean + token   // TokenBucket
	Fixed   = lean + fixed   // FixedWindow
	Sliding = lean + sliding // SlidingWindow
	Log     = lean + log     // SlidingLog
)

var (
	//go:embed lean.lua
	lean string
	//go:embed tat.lua
	tat string
	//go:embed token.lua
	token string
	//go:embed fixed.lua
	fixed string
	//go:embed sliding.lua
	sliding string
	//go:embed log.lua
	log string
)

// The shape of the take script's arguments and reply.
const (
	KeysPerLimit    = 2  // state key, lock key
	ArgsPerLimit    = 6  // code, R, P, B, T, L
	RepliesPerLimit = 6  // allowed, limit, remaining, retry, reset, delay
	RetryNever      = -1 // the retry figure of a cost that can never pass
	// MaxCost is the largest cost the scripts take; every limit's capacity
	// is below it, so a larger cost is sent as MaxCost with the same outcome.
	MaxCost = 1 << 53
)

// Resent, sent in place of a script call's cost (ARGV[1] of Take and the
// lean scripts, ARGV[6] of Lease), makes the script refuse the call with
// an error whose text starts with ResentError, reading and writing
// nothing. The Redis store sends a charging call's cost the first time the
// client writes the command and Resent every later time, so that a call the
// client library sends again on its own (after a broken connection or a
// timeout, when the first sending may have run) is never charged twice.
const (
	Resent      = "resent"
	ResentError = "SLUICE re-sent call refused"
)

// Algorithm codes, the first argument of each limit.
const (
	CodeGCRA          = "g"
	CodeLeakyBucket   = "k"
	CodeTokenBucket   = "t"
	CodeFixedWindow   = "f"
	CodeSlidingWindow = "w"
	CodeSlidingLog    = "l"
	CodeInFlight      = "i"
)
