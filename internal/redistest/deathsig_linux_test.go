//go:build linux

package redistest

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestHelperServerOwner is not a test: run by TestServerDiesWithTestBinary
// as a child process, it starts a server, prints its pid and waits to be
// killed.
func TestHelperServerOwner(t *testing.T) {
	if os.Getenv("REDISTEST_HELPER_OWNER") != "1" {
		t.Skip("helper process for TestServerDiesWithTestBinary")
	}
	s := StartServer(t)
	fmt.Printf("pid %d %s\n", s.pid(), s.Addr)
	time.Sleep(time.Minute)
}

func TestServerDiesWithTestBinary(t *testing.T) {
	t.Parallel()
	if _, err := redisServerPath(); err != nil {
		failStart(t, err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperServerOwner$", "-test.v")
	cmd.Env = append(os.Environ(), "REDISTEST_HELPER_OWNER=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // no stray helper if we die
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()

	var pid int
	var addr string
	lines := bufio.NewScanner(out)
	for lines.Scan() {
		if f := strings.Fields(lines.Text()); len(f) == 3 && f[0] == "pid" {
			pid, _ = strconv.Atoi(f[1])
			addr = f[2]
			break
		}
	}
	if pid == 0 {
		t.Fatalf("helper printed no pid (scan error %v)", lines.Err())
	}
	if _, err := probe(addr, time.Second); err != nil {
		t.Fatalf("helper's server at %s does not answer: %v", addr, err)
	}

	// SIGKILL: no cleanup runs in the helper, only the death signal.
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	err = waitFor(5*time.Second, func() error {
		if exited(pid) {
			return nil
		}
		return fmt.Errorf("redis-server pid %d still alive", pid)
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := probe(addr, time.Second); err == nil {
		t.Errorf("%s still answers after its test binary died", addr)
	}
}

// exited reports whether pid is gone or a zombie (its new parent may not
// reap it, e.g. in a container whose init does not).
func exited(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	// The state follows the parenthesised command name.
	i := strings.LastIndexByte(string(stat), ')')
	return i >= 0 && i+2 < len(stat) && stat[i+2] == 'Z'
}
