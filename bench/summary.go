package main

import (
	"fmt"
	"strings"
)

// check formats one target: the figure, the target, and whether it holds.
func check(label string, value float64, have bool, op string, target float64, format string) string {
	if !have {
		return label + " n/a"
	}
	holds := false
	switch op {
	case ">=":
		holds = value >= target
	case "<=":
		holds = value <= target
	case "<":
		holds = value < target
	}
	verdict := "ok"
	if !holds {
		verdict = "MISS"
	}
	return fmt.Sprintf("%s "+format+" (%s%g %s)", label, value, op, target, verdict)
}

// summary is the one-line digest of issue 4's targets, printed last.
func summary(results []*caseResult, mem []memResult, adapters []adapterResult) string {
	var parts []string
	const c = 64

	// Allow path, c=64.
	gcra := find(results, "sluice-redis/gcra", "allow", c)
	rr := find(results, "redis_rate", "allow", c)
	fw := find(results, "sluice-redis/fixed_window", "allow", c)
	ul := find(results, "ulule-redis", "allow", c)
	v, ok := div(gcra, rr)
	parts = append(parts, check("allow c64 gcra/redis_rate", v, ok, ">=", 1.4, "%.2fx"))
	if v, ok := div(find(results, "sluice-plain/gcra", "allow", c), rr); ok {
		parts = append(parts, fmt.Sprintf("(unpipelined %.2fx)", v))
	}
	v, ok = div(fw, ul)
	parts = append(parts, check("fixed_window/ulule", v, ok, ">=", 1.1, "%.2fx"))
	if v, ok := div(find(results, "sluice-plain/fixed_window", "allow", c), ul); ok {
		parts = append(parts, fmt.Sprintf("(unpipelined %.2fx)", v))
	}
	algs := sluiceNames(results, "redis", "allow", c)
	if len(algs) > 0 && ul != nil {
		worst, worstName := 0.0, ""
		for i, r := range algs {
			if x := r.rate() / ul.rate(); i == 0 || x < worst {
				worst, worstName = x, shortName(r)
			}
		}
		parts = append(parts, check("slowest alg("+worstName+")/ulule", worst, true, ">=", 3, "%.2fx"))
	} else {
		parts = append(parts, "slowest alg/ulule n/a")
	}
	if len(algs) > 0 && rr != nil && rr.p99 > 0 {
		worst, worstName := 0.0, ""
		for i, r := range algs {
			if x := float64(r.p99) / float64(rr.p99); i == 0 || x > worst {
				worst, worstName = x, shortName(r)
			}
		}
		parts = append(parts, check("worst p99("+worstName+")/redis_rate", worst, true, "<=", 1, "%.2fx"))
	} else {
		parts = append(parts, "p99/redis_rate n/a")
	}

	// Deny path, c=64.
	dalgs := sluiceNames(results, "redis", "deny", c)
	var fastest *caseResult
	for _, p := range peersOf(results, "redis", "deny", c) {
		if fastest == nil || p.rate() > fastest.rate() {
			fastest = p
		}
	}
	if len(dalgs) > 0 && fastest != nil {
		worst, worstName, cmds := 0.0, "", 0.0
		for i, r := range dalgs {
			if x := r.rate() / fastest.rate(); i == 0 || x < worst {
				worst, worstName = x, shortName(r)
			}
			if r.decisions > 0 {
				cmds = max(cmds, 100*float64(r.totalCalls())/float64(r.decisions))
			}
		}
		parts = append(parts, check("deny c64 slowest alg("+worstName+")/fastest peer("+fastest.im.name+")", worst, true, ">=", 10, "%.2fx"))
		parts = append(parts, check("Redis cmds per 100 denied (worst alg)", cmds, true, "<", 1, "%.3f"))
	} else {
		parts = append(parts, "deny c64 n/a")
	}

	// c=1 latency.
	for _, group := range []string{"redis", "memory"} {
		s1 := sluiceNames(results, group, "allow", 1)
		p1 := peersOf(results, group, "allow", 1)
		if len(s1) == 0 || len(p1) == 0 {
			parts = append(parts, "c1 p50 "+group+" n/a")
			continue
		}
		best := p1[0]
		for _, p := range p1 {
			if p.p50 > 0 && p.p50 < best.p50 {
				best = p
			}
		}
		worst := s1[0]
		for _, r := range s1 {
			if r.p50 > worst.p50 {
				worst = r
			}
		}
		parts = append(parts, check(fmt.Sprintf("c1 p50 %s worst(%s %s)/best peer(%s %s)", group, shortName(worst), fmtDur(worst.p50), best.im.name, fmtDur(best.p50)),
			float64(worst.p50)/float64(best.p50), best.p50 > 0, "<=", 1, "%.2fx"))
	}

	// Redis CPU per GCRA decision, allow c=64.
	if gcra != nil && rr != nil && gcra.decisions > 0 && rr.decisions > 0 && rr.redisCPU > 0 {
		g := gcra.redisCPU / float64(gcra.decisions)
		r := rr.redisCPU / float64(rr.decisions)
		parts = append(parts, check(fmt.Sprintf("Redis CPU/dec gcra %.2fµs / redis_rate %.2fµs", g*1e6, r*1e6), g/r, true, "<=", 0.6, "%.2fx"))
		if p := find(results, "sluice-plain/gcra", "allow", c); p != nil && p.decisions > 0 {
			u := p.redisCPU / float64(p.decisions)
			parts = append(parts, fmt.Sprintf("(unpipelined %.2fµs, %.2fx)", u*1e6, u/r))
		}
	} else {
		parts = append(parts, "Redis CPU gcra/redis_rate n/a")
	}

	// Memory store vs x/time/rate.
	var xr *memResult
	var sm []memResult
	for i := range mem {
		if mem[i].name == "x/time/rate" {
			xr = &mem[i]
		}
		if mem[i].sluice {
			sm = append(sm, mem[i])
		}
	}
	if xr != nil && len(sm) > 0 {
		ws, wp, allocs := 0.0, 0.0, int64(0)
		for _, m := range sm {
			ws = max(ws, m.serialNs/xr.serialNs)
			wp = max(wp, m.parallelNs/xr.parallelNs)
			allocs = max(allocs, m.serialAllocs, m.parallelAllocs)
		}
		parts = append(parts, check("mem ns/op worst alg/x-time-rate serial", ws, true, "<=", 1, "%.2fx"),
			check("parallel", wp, true, "<=", 1, "%.2fx"),
			check("allocs/op", float64(allocs), true, "<=", 0, "%.0f"))
	} else {
		parts = append(parts, "mem vs x/time/rate n/a")
	}

	// HTTP adapters over the bare handler, memory store.
	if len(adapters) > 0 {
		worstNs, worstAllocs, name := 0.0, int64(0), ""
		for i, a := range adapters {
			if d := a.limitedNs - a.bareNs; i == 0 || d > worstNs {
				worstNs, name = d, a.name
			}
			worstAllocs = max(worstAllocs, a.limitedAlloc-a.bareAllocs)
		}
		parts = append(parts, check("adapter over bare, worst("+name+") ns", worstNs, true, "<=", 1000, "%.0f"),
			check("allocs", float64(worstAllocs), true, "<=", 2, "%.0f"))
	} else {
		parts = append(parts, "adapters n/a")
	}
	parts = append(parts, leaseSummary(results))
	return "SUMMARY: " + strings.Join(parts, "; ")
}

func div(a, b *caseResult) (float64, bool) {
	if a == nil || b == nil || a.rate() <= 0 || b.rate() <= 0 {
		return 0, false
	}
	return a.rate() / b.rate(), true
}

// shortName drops the "sluice-redis/" or "sluice-mem/" prefix.
func shortName(r *caseResult) string {
	if i := strings.LastIndexByte(r.im.name, '/'); i >= 0 && r.im.sluice {
		return r.im.name[i+1:]
	}
	return r.im.name
}
