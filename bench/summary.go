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

// summary is the one-line digest of the targets of issues 4, 12 and 30,
// printed last.
func summary(results []*caseResult, mem []memResult, adapters []adapterResult) string {
	parts := allowSummary(results)
	const c = 64

	// Deny path, c=64: the defaults (exact, every denial from Redis), then
	// the opt-in deny cache (sluice-redis+deny/).
	parts = append(parts, denySummary(results, sluiceNames(results, "redis", "deny", c), "deny c64", ""))
	parts = append(parts, denySummary(results, denyCacheNames(results, "deny", c),
		fmt.Sprintf("deny c64 with WithDenyCache(%d)", denyCacheSize), " (deny cache)"))

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
			if strings.HasSuffix(m.name, "/gcra") {
				parts = append(parts, check(fmt.Sprintf("mem gcra serial %.0fns / x-time-rate %.0fns", m.serialNs, xr.serialNs), m.serialNs/xr.serialNs, true, "<=", 1, "%.2fx"))
			}
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

// denySummary holds issue 4's deny-path target for the sluice results
// algs at c=64: the slowest at least 10× the fastest Redis peer's
// decisions/s, and under 1 Redis command per 100 denials for the worst.
// label starts the first item, tag ends the second one's label.
func denySummary(results []*caseResult, algs []*caseResult, label, tag string) string {
	const c = 64
	var fastest *caseResult
	for _, p := range peersOf(results, "redis", "deny", c) {
		if fastest == nil || p.rate() > fastest.rate() {
			fastest = p
		}
	}
	if len(algs) == 0 || fastest == nil {
		return label + " n/a"
	}
	worst, worstName, cmds := 0.0, "", 0.0
	for i, r := range algs {
		if x := r.rate() / fastest.rate(); i == 0 || x < worst {
			worst, worstName = x, shortName(r)
		}
		if r.decisions > 0 {
			cmds = max(cmds, 100*float64(r.totalCalls())/float64(r.decisions))
		}
	}
	return check(label+" slowest alg("+worstName+")/fastest peer("+fastest.im.name+")", worst, true, ">=", 10, "%.2fx") + "; " +
		check("Redis cmds per 100 denied (worst alg)"+tag, cmds, true, "<", 1, "%.3f")
}

// allowSummary holds issue 30's targets on the allow path at c=64, sluice
// with its defaults against the peers: decisions/s, Redis CPU and client
// CPU per decision, and p99.
func allowSummary(results []*caseResult) []string {
	const c = 64
	var parts []string
	gcra := find(results, "sluice-redis/gcra", "allow", c)
	rr := find(results, "redis_rate", "allow", c)
	fw := find(results, "sluice-redis/fixed_window", "allow", c)
	ul := find(results, "ulule-redis", "allow", c)
	algs := sluiceNames(results, "redis", "allow", c)

	v, ok := div(gcra, rr)
	parts = append(parts, check("allow c64 dec/s gcra/redis_rate", v, ok, ">=", 3.5, "%.2fx"))
	v, ok = div(fw, ul)
	parts = append(parts, check("fixed_window/ulule", v, ok, ">=", 3.5, "%.2fx"))
	if w, name := worstBy(algs, func(r *caseResult) float64 { return -r.rate() }); w != nil && ul != nil {
		parts = append(parts, check("slowest alg("+name+")/ulule", w.rate()/ul.rate(), true, ">=", 2, "%.2fx"))
	}

	cpu := func(r *caseResult) float64 { return r.redisCPU / float64(r.decisions) }
	if have(gcra, rr) {
		parts = append(parts, check(fmt.Sprintf("Redis CPU/dec gcra %.2fµs / redis_rate %.2fµs", cpu(gcra)*1e6, cpu(rr)*1e6), cpu(gcra)/cpu(rr), true, "<=", 0.25, "%.2fx"))
	}
	if have(fw, ul) {
		parts = append(parts, check(fmt.Sprintf("fixed_window %.2fµs / ulule %.2fµs", cpu(fw)*1e6, cpu(ul)*1e6), cpu(fw)/cpu(ul), true, "<=", 0.3, "%.2fx"))
		if w, name := worstBy(algs, cpu); w != nil {
			parts = append(parts, check(fmt.Sprintf("worst alg(%s %.2fµs)/ulule", name, cpu(w)*1e6), cpu(w)/cpu(ul), true, "<=", 0.5, "%.2fx"))
		}
	}
	goCPU := func(r *caseResult) float64 { return float64(r.goCPU.Nanoseconds()) / 1e3 / float64(r.decisions) }
	var client []string
	for _, r := range []*caseResult{gcra, fw, rr, ul} {
		if have(r) {
			client = append(client, fmt.Sprintf("%s %.2fµs", shortName(r), goCPU(r)))
		}
	}
	if w, name := worstBy(algs, goCPU); w != nil {
		client = append(client, fmt.Sprintf("worst alg(%s) %.2fµs", name, goCPU(w)))
	}
	parts = append(parts, "client CPU/dec "+strings.Join(client, ", "))

	if w, name := worstBy(algs, func(r *caseResult) float64 { return float64(r.p99) }); w != nil && have(rr, ul) {
		better := rr
		if ul.p99 < rr.p99 {
			better = ul
		}
		parts = append(parts, check(fmt.Sprintf("worst p99(%s %s)/better peer(%s %s)", name, fmtDur(w.p99), better.im.name, fmtDur(better.p99)),
			float64(w.p99)/float64(better.p99), better.p99 > 0, "<=", 1, "%.2fx"))
	}
	return parts
}

// worstBy returns the result with the largest key, and its short name.
func worstBy(rs []*caseResult, key func(*caseResult) float64) (*caseResult, string) {
	var w *caseResult
	for _, r := range rs {
		if r.decisions > 0 && (w == nil || key(r) > key(w)) {
			w = r
		}
	}
	if w == nil {
		return nil, ""
	}
	return w, shortName(w)
}

// have reports whether every result exists and made decisions.
func have(rs ...*caseResult) bool {
	for _, r := range rs {
		if r == nil || r.decisions == 0 {
			return false
		}
	}
	return true
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
