package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// runScriptInstr measures the instructions redis-server executes per
// decision of every -scriptcost case, under valgrind's callgrind: the
// case's calls decisions, and twice as many, each on a fresh server, whose
// difference leaves out its start, the scripts' loading and its shutdown.
// Instruction counts, unlike times, repeat from run to run whatever else
// the machine does, so that a change of a script shows as a change of its
// count.
func runScriptInstr(ctx context.Context, redisBin string, calls int) error {
	if _, err := exec.LookPath("valgrind"); err != nil {
		return fmt.Errorf("-callgrind needs valgrind: %w", err)
	}
	names, per, err := scriptCaseNames(ctx, redisBin)
	if err != nil {
		return err
	}
	fmt.Printf("\n== redis-server instructions per decision under callgrind (a batch's ÷ %d): (I(2n) - I(n)) / n, n = %d decisions ==\n", batchSize, calls)
	for i, name := range names {
		a, err := serverInstr(ctx, redisBin, i, calls)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		b, err := serverInstr(ctx, redisBin, i, 2*calls)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		// a batch case runs whole batches: calls/per of them
		fmt.Printf("%-16s %9.0f\n", name, float64(b-a)/float64((2*calls/per[i]-calls/per[i])*per[i]))
	}
	return nil
}

// scriptCaseNames returns the names of the -scriptcost cases, in order,
// and the decisions each command of each makes.
func scriptCaseNames(ctx context.Context, redisBin string) ([]string, []int, error) {
	srv, err := startRedis(redisBin)
	if err != nil {
		return nil, nil, err
	}
	defer srv.kill()
	c := redis.NewClient(&redis.Options{Addr: srv.addr, DisableIdentity: true})
	defer c.Close()
	cases, err := scriptCases(ctx, c)
	if err != nil {
		return nil, nil, err
	}
	names, per := make([]string, len(cases)), make([]int, len(cases))
	for i, sc := range cases {
		names[i], per[i] = sc.name, max(sc.calls, 1)
	}
	return names, per, nil
}

// serverInstr runs calls decisions of case i on a fresh redis-server under
// callgrind, and returns the instructions the server executed in all.
func serverInstr(ctx context.Context, redisBin string, i, calls int) (int64, error) {
	out := filepath.Join(os.TempDir(), fmt.Sprintf("sluice-bench-callgrind-%d.out", os.Getpid()))
	defer os.Remove(out)
	srv, err := startRedis(redisBin, "valgrind", "--tool=callgrind", "--callgrind-out-file="+out)
	if err != nil {
		return 0, err
	}
	defer srv.kill()
	c := redis.NewClient(&redis.Options{Addr: srv.addr, DisableIdentity: true, MaxRetries: -1})
	defer c.Close()
	cases, err := scriptCases(ctx, c)
	if err != nil {
		return 0, err
	}
	if _, err := scriptCost(ctx, c, srv.addr, cases[i], makeKeys(1000), calls); err != nil {
		return 0, err
	}
	// callgrind writes its counts when the server exits by itself; the
	// reply to SHUTDOWN is the connection closing.
	_ = c.ShutdownNoSave(ctx).Err()
	select {
	case <-srv.done:
	case <-time.After(60 * time.Second):
		return 0, fmt.Errorf("redis-server under valgrind did not exit within 60s of SHUTDOWN\n%s", srv.log())
	}
	return callgrindTotal(out)
}

// callgrindTotal reads the instruction count of a callgrind output file
// (its "totals:" or "summary:" line).
func callgrindTotal(path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		for _, p := range []string{"totals: ", "summary: "} {
			if v, ok := strings.CutPrefix(sc.Text(), p); ok {
				return strconv.ParseInt(strings.Fields(v)[0], 10, 64)
			}
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("%s: no totals line", path)
}
