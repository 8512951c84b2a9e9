// Command bench measures sluice against other Go rate limiters, side by side,
// on one redis-server it starts and owns.
//
// Usage:
//
//	cd bench && go run . [-d 2s] [-c 1,16,64,256] [-keys 1000] [-impls all] [-paths allow,deny,hot] [-inflight 0] [-scriptcost 0]
//
// Every implementation runs on the same server, with the same keys and the
// same concurrency, on two paths: allow (the limit is never reached) and
// deny (every key is exhausted before the measurement starts). Each case runs
// for a fixed time after a short warm-up and prints decisions per second,
// p50/p99 latency of one decision, Redis CPU per decision and Redis commands
// per decision (both from INFO, deltas over the measured interval), and the
// bench process's own CPU per decision. Ratios of sluice to every peer are
// computed from the same run, and the last line printed is a one-line
// summary of the figures that the targets of issues 4, 12 and 30 name. -inflight
// compares WithPipelining settings in one run; -scriptcost measures the
// Redis time per call of each sluice script instead.
//
// sluice runs twice on Redis: sluice-redis/<algorithm> is a redisstore.Store
// with its defaults (automatic pipelining on, the deny cache off), and
// sluice-plain/<algorithm> the same with both off, one EVALSHA round trip
// per decision. sluice-redis+deny/<algorithm> is the defaults plus
// redisstore.WithDenyCache(4096) (allow and deny paths): the SUMMARY
// reports the deny path's target for the defaults (every denial decided by
// Redis) and for the opt-in deny cache. sluice-two/gcra+fixed_window takes
// two limits per decision, as README's quick start does (the take script;
// the SUMMARY leaves it out).
//
// The hot path has every goroutine take one key, never exhausted, and runs
// only sluice: sluice-redis/<algorithm> (exact) against
// sluice-lease/<algorithm>, the same store with redisstore.WithLeases (lease
// mode, for the four algorithms it leases). It prints lease mode's
// decisions/s over the exact path's and both paths' Redis calls (script
// calls) per decision, and the SUMMARY line ends with issue 12's target.
//
// The module is separate from the library so that the library never depends
// on the peers it is compared with. go test -bench . in this directory runs
// the in-memory comparisons (serial and parallel, with allocations).
package main
