package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

func main() { os.Exit(run()) }

func run() (code int) {
	dur := flag.Duration("d", 2*time.Second, "measured time per case")
	warmup := flag.Duration("warmup", 300*time.Millisecond, "unmeasured warm-up per case, at the case's concurrency")
	concList := flag.String("c", "1,16,64,256", "comma-separated concurrency levels (goroutines)")
	nkeys := flag.Int("keys", 1000, "number of distinct keys")
	implList := flag.String("impls", "all", `comma-separated contenders, by name or name prefix ("sluice", "redis_rate", "sluice-redis/gcra"); "all" for every one`)
	pathList := flag.String("paths", "allow,deny,hot", "comma-separated paths: allow (limit never reached), deny (every key exhausted first), hot (one key for every goroutine, limit never reached: sluice exact vs lease mode)")
	redisBin := flag.String("redis-server", "redis-server", "redis-server binary to start")
	poolSize := flag.Int("pool", 0, "go-redis PoolSize for every contender (0: go-redis default, 10 per GOMAXPROCS)")
	memBench := flag.Bool("membench", true, "also run the in-memory and HTTP adapter ns/op and allocs/op comparisons (testing.Benchmark, about 1-2 s each)")
	inFlightList := flag.String("inflight", "0", "round trips in flight for the sluice-redis contenders (redisstore.WithPipelining; 0: the library's default); each further comma-separated value adds contenders sluice-redis@<value>/<algorithm>")
	rounds := flag.Int("rounds", 1, "measure every case this many times, contenders interleaved, and report the run of median decisions/s")
	list := flag.Bool("list", false, "list the contenders and exit")
	scriptCalls := flag.Int("scriptcost", 0, "instead of the contenders, measure the Redis time per decision of each sluice script (EVALSHA; FCALL and a batch of 64 for the lean ones), this many decisions per case and round")
	callgrind := flag.Bool("callgrind", false, "with -scriptcost n: measure instead the instructions redis-server executes per decision of each script, under valgrind's callgrind (n and 2n decisions on fresh servers; needs valgrind; a few minutes)")
	flag.Parse()

	var err error
	if inFlight, err = parseCounts(*inFlightList); err != nil {
		fmt.Fprintln(os.Stderr, "bench: bad -inflight:", err)
		return 2
	}
	all := contenders()
	if *list {
		for _, im := range all {
			fmt.Printf("%-28s %s\n", im.name, im.group)
		}
		return 0
	}
	concs, err := parseInts(*concList)
	if err != nil || *nkeys <= 0 || *dur <= 0 || *rounds <= 0 {
		fmt.Fprintln(os.Stderr, "bench: bad flags: -c wants positive integers, -keys, -d and -rounds must be positive", err)
		return 2
	}
	paths := splitList(*pathList)
	for _, p := range paths {
		if p != "allow" && p != "deny" && p != "hot" {
			fmt.Fprintf(os.Stderr, "bench: unknown path %q (want allow, deny, hot)\n", p)
			return 2
		}
	}
	selected := selectImpls(all, splitList(*implList))
	if len(selected) == 0 {
		fmt.Fprintf(os.Stderr, "bench: -impls %q matches no contender (see -list)\n", *implList)
		return 2
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	srv, err := startRedis(*redisBin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	defer srv.kill()
	defer func() {
		if r := recover(); r != nil {
			srv.kill()
			panic(r)
		}
	}()
	go func() { <-ctx.Done(); srv.kill() }() // a signal stops the server at once

	admin := redis.NewClient(&redis.Options{Addr: srv.addr, DisableIdentity: true})
	defer admin.Close()

	if *scriptCalls > 0 && *callgrind {
		fmt.Printf("redis-server %s under callgrind\n", srv.version)
		if err := runScriptInstr(ctx, *redisBin, *scriptCalls); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			return 1
		}
		return 0
	}
	if *scriptCalls > 0 {
		fmt.Printf("redis-server %s on %s, load average at start: %s\n", srv.version, srv.addr, loadAvg())
		if err := runScriptCost(ctx, srv.addr, *rounds, *scriptCalls); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			return 1
		}
		fmt.Printf("load average at end: %s\n", loadAvg())
		return 0
	}

	printMachine(srv, *dur, *warmup, *nkeys, *poolSize, *rounds)
	cfg := runConfig{dur: *dur, warmup: *warmup, keys: makeKeys(*nkeys), poolSize: *poolSize}
	var results []*caseResult
	for _, path := range paths {
		for _, conc := range concs {
			fmt.Printf("\n== %s path, concurrency %d ==\n", path, conc)
			printHeader()
			// Every contender runs once per round, in turn, so that a burst
			// of outside load hits all of them rather than one.
			runs := make([][]*caseResult, len(selected))
			failed := make([]bool, len(selected))
			for range *rounds {
				for i, im := range selected {
					if !im.runsOn(path) || failed[i] {
						continue
					}
					res, err := runCase(ctx, admin, srv.addr, im, path, conc, cfg)
					if ctx.Err() != nil {
						fmt.Fprintln(os.Stderr, "bench: interrupted")
						return 130
					}
					if err != nil {
						fmt.Printf("%-32s ERROR %v\n", im.name, err)
						failed[i] = true
						continue
					}
					runs[i] = append(runs[i], res)
				}
			}
			for i := range selected {
				if failed[i] || len(runs[i]) == 0 {
					continue
				}
				res := median(runs[i])
				printRow(res)
				results = append(results, res)
			}
		}
	}
	srv.kill()

	var mem []memResult
	var adapters []adapterResult
	if *memBench {
		mem = runMemBench(selected)
		adapters = runAdapterBench()
	}
	printRatios(results, paths, concs)
	printLeaseRatios(results, concs)
	fmt.Printf("load average at end: %s\n", loadAvg())
	fmt.Println(summary(results, mem, adapters))
	return 0
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range splitList(s) {
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%q is not a positive integer", f)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, errors.New("empty list")
	}
	return out, nil
}

// parseCounts parses a comma-separated list of integers >= 0.
func parseCounts(s string) ([]int, error) {
	var out []int
	for _, f := range splitList(s) {
		n, err := strconv.Atoi(f)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("%q is not an integer >= 0", f)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, errors.New("empty list")
	}
	return out, nil
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func selectImpls(all []impl, names []string) []*impl {
	var out []*impl
	for i := range all {
		im := &all[i]
		for _, n := range names {
			if n == "all" || im.name == n || strings.HasPrefix(im.name, n) {
				out = append(out, im)
				break
			}
		}
	}
	return out
}

func printMachine(srv *redisServer, dur, warmup time.Duration, nkeys, pool, rounds int) {
	fmt.Printf("sluice bench: %s, GOMAXPROCS %d, NumCPU %d, CPU %q\n", runtime.Version(), runtime.GOMAXPROCS(0), runtime.NumCPU(), cpuModel())
	fmt.Printf("redis-server %s on %s (--save \"\" --appendonly no), started by this run\n", srv.version, srv.addr)
	fmt.Printf("load average at start: %s\n", loadAvg())
	poolDesc := "go-redis default"
	if pool > 0 {
		poolDesc = strconv.Itoa(pool)
	}
	fmt.Printf("%v measured + %v warm-up per case, %d round(s), %d keys, pool %s\n", dur, warmup, rounds, nkeys, poolDesc)
	inflight := inFlight[0]
	if inflight == 0 {
		inflight = 2 // the Redis store's default (WithPipelining)
	}
	fmt.Printf("sluice-redis: %d round trips in flight before Takes share pipelines (WithPipelining)\n", inflight)
	for _, n := range inFlight[1:] {
		fmt.Printf("sluice-redis@%d: %d round trips in flight\n", n, n)
	}
	fmt.Printf("allow quota (never reached): %v; deny quota (exhausted first): %v\n", allowQuota, denyQuota)
	fmt.Printf("hot quota (one key, never reached): %v\n", hotQuota)
	fmt.Println("columns: dec/s = decisions per second; p50/p99 = latency of one call (pipe16: of 16 decisions; in-memory: 1 call in 64 timed);")
	fmt.Println("  redisCPU = redis-server user+sys CPU per decision (INFO cpu); script = time Redis spent running EVAL/EVALSHA per decision (INFO commandstats usec);")
	fmt.Println("  cmds = Redis commands per decision, scripts' inner calls included (INFO commandstats);")
	fmt.Println("  calls = Redis calls (script calls: EVALSHA, EVAL) per decision, on the hot path;")
	fmt.Println("  goCPU = this process's CPU per decision; ok% = share allowed; spread = (max-min)/median dec/s over the rounds;")
	fmt.Println("  top = most frequent Redis commands per decision. With several rounds, every figure is from the median round.")
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

func printHeader() {
	fmt.Printf("%-32s %11s %7s %9s %9s %9s %8s %7s %8s %6s %5s  %s\n",
		"contender", "dec/s", "spread", "p50", "p99", "redisCPU", "script", "cmds", "goCPU", "ok%", "errs", "top")
}

func printRow(r *caseResult) {
	redisCPU, script, cmds, top := "-", "-", "-", ""
	if r.im.group == "redis" && r.decisions > 0 {
		redisCPU = fmt.Sprintf("%.2fµs", r.redisCPU*1e6/float64(r.decisions))
		if r.scriptUs > 0 {
			script = fmt.Sprintf("%.2fµs", float64(r.scriptUs)/float64(r.decisions))
		}
		cmds = fmt.Sprintf("%.3f", float64(r.totalCalls())/float64(r.decisions))
		top = topCommands(r, 5)
	}
	goCPU, ok := "-", "-"
	if r.decisions > 0 {
		goCPU = fmt.Sprintf("%.2fµs", float64(r.goCPU.Nanoseconds())/1e3/float64(r.decisions))
		ok = fmt.Sprintf("%.1f", 100*float64(r.allowed)/float64(r.decisions))
	}
	spread := "-"
	if r.rounds > 1 {
		spread = fmt.Sprintf("%.0f%%", 100*r.spread)
	}
	fmt.Printf("%-32s %11.0f %7s %9s %9s %9s %8s %7s %8s %6s %5d  %s\n",
		r.im.name, r.rate(), spread, fmtDur(r.p50), fmtDur(r.p99), redisCPU, script, cmds, goCPU, ok, r.errors, top)
	if r.firstErr != nil {
		fmt.Printf("%-32s first error: %v\n", "", r.firstErr)
	}
}

func topCommands(r *caseResult, n int) string {
	type kv struct {
		name  string
		calls int64
	}
	var list []kv
	for k, v := range r.calls {
		if !benchOverhead[k] {
			list = append(list, kv{k, v})
		}
	}
	sort.Slice(list, func(i, j int) bool {
		if list[i].calls != list[j].calls {
			return list[i].calls > list[j].calls
		}
		return list[i].name < list[j].name
	})
	var parts []string
	for i := 0; i < len(list) && i < n; i++ {
		parts = append(parts, fmt.Sprintf("%s %.2f", list[i].name, float64(list[i].calls)/float64(r.decisions)))
	}
	return strings.Join(parts, ", ")
}

func fmtDur(d time.Duration) string {
	switch {
	case d <= 0:
		return "-"
	case d < time.Microsecond:
		return fmt.Sprintf("%dns", d.Nanoseconds())
	case d < time.Millisecond:
		return fmt.Sprintf("%.1fµs", float64(d.Nanoseconds())/1e3)
	default:
		return fmt.Sprintf("%.2fms", float64(d.Nanoseconds())/1e6)
	}
}

// median returns the run of median decisions/s (the lower middle one for
// an even count), with the rounds' spread recorded on it.
func median(runs []*caseResult) *caseResult {
	sorted := append([]*caseResult(nil), runs...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].rate() < sorted[j].rate() })
	m := sorted[(len(sorted)-1)/2]
	m.rounds = len(sorted)
	if mr := m.rate(); mr > 0 {
		m.spread = (sorted[len(sorted)-1].rate() - sorted[0].rate()) / mr
	}
	return m
}

// find returns the result of the named contender in one case, or nil.
func find(results []*caseResult, name, path string, conc int) *caseResult {
	for _, r := range results {
		if r.im.name == name && r.path == path && r.conc == conc {
			return r
		}
	}
	return nil
}

// printRatios prints, per path and concurrency, sluice's decisions/s divided
// by each other contender's in the same group (Redis or memory).
func printRatios(results []*caseResult, paths []string, concs []int) {
	fmt.Println("\n== ratios: sluice decisions/s ÷ other contender's, same path and concurrency, same run ==")
	for _, path := range paths {
		for _, conc := range concs {
			for _, group := range []string{"redis", "memory"} {
				var rows, cols []*caseResult
				for _, r := range results {
					if r.path != path || r.conc != conc || r.im.group != group {
						continue
					}
					if r.im.sluice {
						rows = append(rows, r)
					} else {
						cols = append(cols, r)
					}
				}
				if len(rows) == 0 || len(cols) == 0 {
					continue
				}
				fmt.Printf("\n%s c=%d (%s)\n%-32s", path, conc, group, "")
				for _, c := range cols {
					fmt.Printf(" %14s", c.im.name)
				}
				fmt.Println()
				for _, r := range rows {
					fmt.Printf("%-32s", r.im.name)
					for _, c := range cols {
						fmt.Printf(" %14s", ratio(r.rate(), c.rate()))
					}
					fmt.Println()
				}
			}
		}
	}
	fmt.Println()
}

func ratio(a, b float64) string {
	if a <= 0 || b <= 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2fx", a/b)
}

// sluiceNames lists the sluice contenders of a group that ran on the path,
// with their default options (the sluice-plain/ ones aside).
func sluiceNames(results []*caseResult, group, path string, conc int) []*caseResult {
	var out []*caseResult
	for _, r := range results {
		if r.im.sluice && r.im.group == group && r.path == path && r.conc == conc &&
			!strings.HasPrefix(r.im.name, "sluice-plain/") && !strings.HasPrefix(r.im.name, "sluice-redis@") &&
			!strings.HasPrefix(r.im.name, denyCachePrefix) && r.im.name != twoLimits && !r.im.hotOnly {
			out = append(out, r)
		}
	}
	return out
}

// denyCacheNames lists the sluice contenders with the deny cache on
// (denyCachePrefix) that ran on the path.
func denyCacheNames(results []*caseResult, path string, conc int) []*caseResult {
	var out []*caseResult
	for _, r := range results {
		if strings.HasPrefix(r.im.name, denyCachePrefix) && r.path == path && r.conc == conc {
			out = append(out, r)
		}
	}
	return out
}

// peersOf lists the peer-library results of a group on the path.
func peersOf(results []*caseResult, group, path string, conc int) []*caseResult {
	var out []*caseResult
	for _, r := range results {
		if r.im.peer && r.im.group == group && r.path == path && r.conc == conc {
			out = append(out, r)
		}
	}
	return out
}
