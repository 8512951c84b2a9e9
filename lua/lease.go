package lua

import _ "embed" // for the script

// Lease is the source of the lease script, which core/redisstore's lease
// mode (redisstore.WithLeases) runs instead of Take for hot keys: it gives
// back the units a process did not spend of its previous lease on one
// limit of one key, then grants it up to a given number of units at once,
// charged as Take would charge them. See lease.lua for its KEYS, ARGV and
// reply. It leases gcra, token_bucket, fixed_window and sliding_window
// limits without a penalty; it refuses other algorithms.
var Lease = lib + lease

//go:embed lease.lua
var lease string

// LeaseReplies is the number of integers of the lease script's reply:
// granted, limit, remaining, retry, reset, window, window left.
const LeaseReplies = 7
