package main

import (
	"fmt"
	"strings"
)

// leasedAlgs are the algorithms lease mode decides, in the order printed.
var leasedAlgs = []string{"gcra", "token_bucket", "fixed_window", "sliding_window"}

// scriptCalls counts the Redis calls of a case: script calls (EVALSHA,
// EVAL and their read-only forms), each one round trip of a Take, a lease
// or a return. The commands the scripts run inside are not calls.
func (r *caseResult) scriptCalls() int64 {
	var n int64
	for _, k := range []string{"eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro"} {
		n += r.calls[k]
	}
	return n
}

// callsPerDecision is scriptCalls per decision (0 when nothing was decided).
func (r *caseResult) callsPerDecision() float64 {
	if r.decisions == 0 {
		return 0
	}
	return float64(r.scriptCalls()) / float64(r.decisions)
}

// leasePair returns the lease-mode and exact results of alg on the hot
// path at conc, or nils.
func leasePair(results []*caseResult, alg string, conc int) (lease, exact *caseResult) {
	return find(results, "sluice-lease/"+alg, "hot", conc), find(results, "sluice-redis/"+alg, "hot", conc)
}

// printLeaseRatios prints, per concurrency and leased algorithm, lease
// mode's decisions/s over the exact path's on the hot path, and each one's
// Redis calls per decision.
func printLeaseRatios(results []*caseResult, concs []int) {
	header := false
	for _, conc := range concs {
		for _, alg := range leasedAlgs {
			lease, exact := leasePair(results, alg, conc)
			if lease == nil || exact == nil {
				continue
			}
			if !header {
				fmt.Println("== hot path: lease mode ÷ exact (sluice-lease/ ÷ sluice-redis/), decisions/s, same run; Redis calls (script calls) per decision ==")
				fmt.Printf("%-5s %-16s %12s %12s %8s %14s %14s\n", "c", "algorithm", "lease dec/s", "exact dec/s", "ratio", "lease calls", "exact calls")
				header = true
			}
			fmt.Printf("%-5d %-16s %12.0f %12.0f %8s %14s %14s\n", conc, alg, lease.rate(), exact.rate(),
				ratio(lease.rate(), exact.rate()), perDecision(lease), perDecision(exact))
		}
	}
	if header {
		fmt.Println()
	}
}

// perDecision renders calls per decision as "0.0123 (1/81)".
func perDecision(r *caseResult) string {
	c := r.callsPerDecision()
	if c == 0 {
		return "0"
	}
	return fmt.Sprintf("%.4f (1/%.0f)", c, 1/c)
}

// leaseSummary is the SUMMARY's part for issue 12's target: on the hot
// path at c=64, lease mode at least 5× the exact path's decisions/s for
// every leased algorithm, with at most 1 Redis call per 20 decisions.
func leaseSummary(results []*caseResult) string {
	const c = 64
	worst, worstAlg, calls, callsAlg, n := 0.0, "", 0.0, "", 0
	var each []string
	for _, alg := range leasedAlgs {
		lease, exact := leasePair(results, alg, c)
		v, ok := div(lease, exact)
		if !ok {
			continue
		}
		if n++; n == 1 || v < worst {
			worst, worstAlg = v, alg
		}
		if x := lease.callsPerDecision(); x >= calls {
			calls, callsAlg = x, alg
		}
		each = append(each, fmt.Sprintf("%s %.2fx", alg, v))
	}
	if n == 0 {
		return "hot c64 lease/exact n/a"
	}
	return strings.Join([]string{
		check("hot c64 lease/exact worst alg("+worstAlg+")", worst, true, ">=", 5, "%.2fx"),
		"(" + strings.Join(each, ", ") + ")",
		check("lease Redis calls/decision worst alg("+callsAlg+")", calls, true, "<=", 0.05, "%.4f"),
	}, "; ")
}
