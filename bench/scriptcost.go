package main

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/core/redisstore"
)

// scriptCase is one command measured by -scriptcost: a script of package
// lua run on one key (of 1000) with the allow path's arguments, by EVALSHA
// or, for the lean scripts, also as a Redis Function (FCALL) and as the
// batch script of batchSize calls (keys from key on).
type scriptCase struct {
	name  string
	stat  string // the command whose usec_per_call is read: evalsha or fcall
	cmd   func(key string) []any
	calls int // decisions per command (0: 1)
}

// batchSize is the calls per command of the batch cases.
const batchSize = 64

// leanArgs are the lean scripts' names (their files' "-- sluice <name>,
// lean:" lines) with the allow path's ARGV after the cost (see sluiceLimit
// and allowQuota).
var leanArgs = []struct {
	name string
	args []any
}{
	{"tat", []any{1_000_000, 100_000}},
	{"token", []any{10, 1_000_000, 1_000_000}},
	{"fixed", []any{500_000, 3_600_000_000}},
	{"sliding", []any{500_000, 3_600_000_000}},
	{"log", []any{100_000, 3_600_000_000, 3_600_000}},
}

// leanScript is a lean script and its batch script, as the Redis store
// sends them, with the allow path's arguments.
type leanScript struct {
	name, src, batch string
	args             []any
}

// storeScripts returns the take script and the lean scripts exactly as the
// Redis store loads them: a Store's Ping on c loads every script (SCRIPT
// LOAD), and a hook keeps their sources, so that the bench measures what
// ships without assembling the scripts itself.
func storeScripts(ctx context.Context, c *redis.Client) (take, takeBatch string, lean []leanScript, err error) {
	var mu sync.Mutex
	var srcs []string
	c.AddHook(loadHook(func(src string) {
		mu.Lock()
		srcs = append(srcs, src)
		mu.Unlock()
	}))
	st, err := redisstore.New(c, redisstore.WithFallback(nil))
	if err != nil {
		return "", "", nil, err
	}
	defer st.Close()
	if err := st.Ping(ctx); err != nil {
		return "", "", nil, err
	}
	mu.Lock()
	defer mu.Unlock()
	for _, l := range leanArgs {
		lean = append(lean, leanScript{name: l.name, args: l.args})
	}
	for _, src := range srcs {
		if strings.HasPrefix(src, "-- sluice record:") { // a recorded twin
			continue
		}
		if strings.Contains(src, "\n-- sluice take:") {
			if strings.Contains(src, "\n-- sluice batch:") {
				takeBatch = src
			} else {
				take = src
			}
		}
		for i := range lean {
			switch {
			case !strings.Contains(src, "\n-- sluice "+lean[i].name+", lean:"):
			case strings.Contains(src, "\nlocal mget = "):
				lean[i].batch = src
			default:
				lean[i].src = src
			}
		}
	}
	if take == "" || takeBatch == "" {
		return "", "", nil, errors.New("the Store loaded no take script or no take batch script")
	}
	for _, l := range lean {
		if l.src == "" || l.batch == "" {
			return "", "", nil, fmt.Errorf("the Store loaded no lean or batch script %q", l.name)
		}
	}
	return take, takeBatch, lean, nil
}

// loadHook is a go-redis hook that passes the source of every SCRIPT LOAD
// to seen.
type loadHook func(src string)

func (h loadHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h loadHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if a := cmd.Args(); len(a) == 3 && strings.EqualFold(fmt.Sprint(a[0]), "script") && strings.EqualFold(fmt.Sprint(a[1]), "load") {
			h(fmt.Sprint(a[2]))
		}
		return next(ctx, cmd)
	}
}

func (h loadHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// functionLibrary is the lean scripts as one Redis Functions library: each
// body becomes a function of KEYS and ARGV, and the globals it calls are
// captured as upvalues on first use (they are not there while the library
// loads), as a library made for speed would do.
func functionLibrary(lean []leanScript) string {
	var b strings.Builder
	b.WriteString("#!lua name=sluicebench\nlocal rcall, rnum, rfmt, rmatch, rfmod\n")
	repl := strings.NewReplacer("redis.call(", "rcall(", "tonumber(", "rnum(", "string.format(", "rfmt(",
		"string.match(", "rmatch(", "math.fmod", "rfmod")
	for _, s := range lean {
		fmt.Fprintf(&b, "redis.register_function('%s', function(KEYS, ARGV)\n", s.name)
		b.WriteString("if not rcall then rcall, rnum, rfmt, rmatch, rfmod = redis.call, tonumber, string.format, string.match, math.fmod end\n")
		b.WriteString(repl.Replace(s.src))
		b.WriteString("\nend)\n")
	}
	return b.String()
}

// scriptCases loads every script and the function library on c and returns
// the cases: "return 1", the take script on one GCRA limit and on two, and
// each lean script by EVALSHA and by FCALL.
func scriptCases(ctx context.Context, c *redis.Client) ([]scriptCase, error) {
	load := func(src string) (string, error) { return c.ScriptLoad(ctx, src).Result() }
	one, err := load("return 1")
	if err != nil {
		return nil, err
	}
	takeSrc, takeBatchSrc, lean, err := storeScripts(ctx, c)
	if err != nil {
		return nil, err
	}
	take, err := load(takeSrc)
	if err != nil {
		return nil, err
	}
	takeBatch, err := load(takeBatchSrc)
	if err != nil {
		return nil, err
	}
	cases := []scriptCase{{"return 1", "evalsha", func(k string) []any { return []any{"evalsha", one, 1, k} }, 0}}
	for _, tc := range []struct {
		name string
		keys func(k string) []any
		args []any
	}{
		{"take (gcra)", func(k string) []any { return []any{k, k + ":x"} }, []any{1, "g", 10, 1_000_000, 1_000_000, 100_000, 0}},
		// two limits, a rate per second and one per hour, as README's
		// quick start, never reached
		{"take (2 gcra)", func(k string) []any { return []any{"{" + k + "}s", "{" + k + "}s", "{" + k + "}h", "{" + k + "}h"} },
			[]any{1, "g", 10, 1_000_000, 1_000_000, 100_000, 0, "g", 500_000, 3_600_000_000, 1_000_000, 7_200, 0}},
	} {
		cases = append(cases,
			scriptCase{tc.name, "evalsha", func(k string) []any {
				ks := tc.keys(k)
				return append(append([]any{"evalsha", take, len(ks)}, ks...), tc.args...)
			}, 0},
			scriptCase{fmt.Sprintf("%s batch/%d", tc.name, batchSize), "evalsha", func(k string) []any {
				return takeBatchCommand(takeBatch, k, tc.keys, tc.args)
			}, batchSize})
	}
	if err := c.FunctionLoadReplace(ctx, functionLibrary(lean)).Err(); err != nil {
		return nil, fmt.Errorf("FUNCTION LOAD: %w", err)
	}
	for _, s := range lean {
		sha, err := load(s.src)
		if err != nil {
			return nil, err
		}
		batch, err := load(s.batch)
		if err != nil {
			return nil, err
		}
		cases = append(cases,
			scriptCase{s.name, "evalsha", func(k string) []any { return append([]any{"evalsha", sha, 1, k, 1}, s.args...) }, 0},
			scriptCase{s.name + " fcall", "fcall", func(k string) []any { return append([]any{"fcall", s.name, 1, k, 1}, s.args...) }, 0},
			scriptCase{fmt.Sprintf("%s batch/%d", s.name, batchSize), "evalsha", func(k string) []any { return batchCommand(batch, k, s.args) }, batchSize})
	}
	return cases, nil
}

// batchCommand is the EVALSHA of the batch script sha for batchSize calls
// of cost 1 on the keys from k on (k's number, then the next ones, of
// 1000), the allow path's arguments args once, as the Redis store sends it.
func batchCommand(sha, k string, args []any) []any {
	cmd := []any{"evalsha", sha, batchSize}
	i, _ := strconv.Atoi(strings.TrimPrefix(k, keyPrefix))
	for j := range batchSize {
		cmd = append(cmd, keyPrefix+strconv.Itoa((i+j)%1000))
	}
	cmd = append(cmd, args...)
	for range batchSize {
		cmd = append(cmd, 1)
	}
	return cmd
}

// takeBatchCommand is the EVALSHA of the take batch script sha for
// batchSize calls on the keys from k on (as batchCommand), each call's
// keys(key) and arguments args, as the Redis store sends it.
func takeBatchCommand(sha, k string, keys func(string) []any, args []any) []any {
	cmd := []any{"evalsha", sha, 0}
	i, _ := strconv.Atoi(strings.TrimPrefix(k, keyPrefix))
	var n int
	for j := range batchSize {
		ks := keys(keyPrefix + strconv.Itoa((i+j)%1000))
		cmd, n = append(cmd, ks...), len(ks)
	}
	cmd[2] = n * batchSize
	for range batchSize {
		cmd = append(append(cmd, n, len(args)), args...)
	}
	return cmd
}

// runScriptCost measures the Redis time per decision of every case (INFO
// commandstats usec_per_call, a batch's divided by its calls): calls
// decisions in pipelines of 16 commands from 8 connections, on 1000 keys
// of a flushed server, the cases interleaved rounds times; it prints each
// case's median.
func runScriptCost(ctx context.Context, addr string, rounds, calls int) error {
	admin := redis.NewClient(&redis.Options{Addr: addr, DisableIdentity: true})
	defer admin.Close()
	cases, err := scriptCases(ctx, admin)
	if err != nil {
		return err
	}
	keys := makeKeys(1000)
	got := make([][]float64, len(cases))
	for range rounds {
		for i, c := range cases {
			us, err := scriptCost(ctx, admin, addr, c, keys, calls)
			if err != nil {
				return fmt.Errorf("%s: %w", c.name, err)
			}
			got[i] = append(got[i], us)
		}
	}
	fmt.Printf("\n== Redis time per decision (INFO commandstats usec_per_call; a batch's ÷ %d), median of %d rounds of %d calls ==\n", batchSize, rounds, calls)
	for i, c := range cases {
		sort.Float64s(got[i])
		fmt.Printf("%-16s %6.2fµs   (rounds: %s)\n", c.name, got[i][(len(got[i])-1)/2], fmtFloats(got[i]))
	}
	return nil
}

func scriptCost(ctx context.Context, admin *redis.Client, addr string, c scriptCase, keys []string, calls int) (float64, error) {
	if err := admin.FlushAll(ctx).Err(); err != nil {
		return 0, err
	}
	if err := admin.ConfigResetStat(ctx).Err(); err != nil {
		return 0, err
	}
	// No retry, no read timeout: under valgrind a batch may take seconds,
	// and a command sent twice would count twice.
	rdb := redis.NewClient(&redis.Options{Addr: addr, DisableIdentity: true, MaxRetries: -1, ReadTimeout: -1})
	defer rdb.Close()
	const conns, depth = 8, 16
	calls /= max(c.calls, 1) // a batch's decisions count
	errs := make([]error, conns)
	var wg sync.WaitGroup
	for w := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w * depth; i < calls; i += conns * depth {
				p := rdb.Pipeline()
				for j := i; j < min(i+depth, calls); j++ {
					p.Do(ctx, c.cmd(keys[j%len(keys)])...)
				}
				if _, err := p.Exec(ctx); err != nil {
					errs[w] = err
					return
				}
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return 0, err
		}
	}
	st, err := snapshot(ctx, admin)
	if err != nil {
		return 0, err
	}
	if st.calls[c.stat] == 0 {
		return 0, fmt.Errorf("no %s calls counted", c.stat)
	}
	return float64(st.usec[c.stat]) / float64(st.calls[c.stat]) / float64(max(c.calls, 1)), nil
}

func fmtFloats(v []float64) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprintf("%.2f", x)
	}
	return strings.Join(s, " ")
}
