package redistest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	// startTimeout bounds the wait for a new process to answer commands.
	startTimeout = 10 * time.Second
	// portAttempts is how often a start is retried on a fresh port when
	// another process took the chosen port first.
	portAttempts = 5
	// restartAttempts and restartPause bound the retries of Restart, which
	// must reuse its port.
	restartAttempts = 20
	restartPause    = 100 * time.Millisecond
)

// errNotInstalled marks a start that failed because redis-server was not
// found; it turns into tb.Skip outside CI.
var errNotInstalled = errors.New("redis-server not installed")

// errPortInUse marks a start that failed because the port was taken.
var errPortInUse = errors.New("port already in use")

// Server is a redis-server process listening on a free 127.0.0.1 port. It
// keeps no data on disk, so a restarted server starts empty (a cluster node
// keeps its cluster identity, which lives in its nodes.conf).
//
// A Server is created by StartServer, StartCluster, Shared or SharedCluster;
// the zero value is not usable. Its methods are safe for concurrent use.
type Server struct {
	// Addr is "127.0.0.1:port"; it stays the same across Restart.
	Addr string

	bin     string
	args    []string // every argument of redis-server, port included
	logPath string
	shared  bool
	nodeID  string // cluster node ID, "" for a standalone server

	mu   sync.Mutex
	proc *process // nil while not running
}

// process is one run of redis-server.
type process struct {
	cmd       *exec.Cmd
	log       *os.File
	logOffset int64         // where this run's output starts in the log
	done      chan struct{} // closed once cmd.Wait has returned
	waitErr   error         // cmd.Wait's result, set before done is closed
}

// StartServer starts a redis-server on a free 127.0.0.1 port with
//
//	--port P --bind 127.0.0.1 --save "" --appendonly no --dir <tb.TempDir()>
//
// followed by extraArgs (e.g. "--maxmemory", "1mb"; later arguments win, so
// they may override --save and --appendonly, but must leave --port, --bind
// and --dir alone), and returns once it answers commands. The process
// is killed at tb.Cleanup. If redis-server is not installed the test is
// skipped, or fails when the environment variable CI is true.
func StartServer(tb testing.TB, extraArgs ...string) *Server {
	tb.Helper()
	return started(tb, func(dir string) (*Server, error) {
		return startServer(dir, extraArgs, freePort)
	})
}

// started runs start in a new tb.TempDir, ends the test as failStart does
// when it fails, and stops what it started at tb.Cleanup (which runs
// before the directory is removed: cleanups run last-in first-out).
func started[T interface{ stop() }](tb testing.TB, start func(dir string) (T, error)) T {
	tb.Helper()
	dir := tb.TempDir()
	v, err := start(dir)
	if err != nil {
		failStart(tb, err)
	}
	tb.Cleanup(v.stop)
	return v
}

// Client returns a go-redis client for s with default options, closed at
// tb.Cleanup.
func (s *Server) Client(tb testing.TB) *redis.Client {
	return closedAtCleanup(tb, redis.NewClient(&redis.Options{Addr: s.Addr}))
}

// closedAtCleanup returns c, which tb.Cleanup closes.
func closedAtCleanup[C io.Closer](tb testing.TB, c C) C {
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// refuseShared fails the test when s is shared: what (Kill, Restart,
// Pause, Freeze, Thaw) would break the other tests that use it.
func (s *Server) refuseShared(tb testing.TB, what string) {
	tb.Helper()
	if s.shared {
		tb.Fatalf("redistest: %s of the shared server %s would break other tests; use StartServer", what, s.Addr)
	}
}

// Kill kills s with SIGKILL and waits for it to exit; a Server that is not
// running is left alone. Connections to s then fail until Restart.
func (s *Server) Kill(tb testing.TB) {
	tb.Helper()
	s.refuseShared(tb, "Kill")
	if err := s.kill(); err != nil {
		tb.Fatalf("redistest: kill %s: %v", s.Addr, err)
	}
}

// Restart starts s again on the same port with the same arguments, killing
// it first if it is still running, and returns once it answers commands. A
// standalone server comes back empty; a cluster node comes back with its
// node ID and rejoins its cluster (see Cluster.WaitHealthy).
func (s *Server) Restart(tb testing.TB) {
	tb.Helper()
	s.refuseShared(tb, "Restart")
	if err := s.kill(); err != nil {
		tb.Fatalf("redistest: restart %s: %v", s.Addr, err)
	}
	var err error
	for range restartAttempts {
		if err = s.launch(); !errors.Is(err, errPortInUse) {
			break
		}
		time.Sleep(restartPause)
	}
	if err != nil {
		tb.Fatalf("redistest: restart %s: %v", s.Addr, err)
	}
}

// Freeze stops s with SIGSTOP: connections are still accepted by the kernel
// but no command is answered, like a Redis stuck in a slow command or a
// network partition. Thaw resumes it; a frozen server is still killed at
// cleanup.
func (s *Server) Freeze(tb testing.TB) {
	tb.Helper()
	s.signal(tb, "Freeze", stopSignal)
}

// Thaw resumes a server stopped by Freeze with SIGCONT.
func (s *Server) Thaw(tb testing.TB) {
	tb.Helper()
	s.signal(tb, "Thaw", continueSignal)
}

// Pause makes s hold every client command for d (CLIENT PAUSE); unlike
// Freeze it needs no Thaw, and s keeps answering cluster and replication
// traffic.
func (s *Server) Pause(tb testing.TB, d time.Duration) {
	tb.Helper()
	s.refuseShared(tb, "Pause")
	err := withAdmin(s.Addr, func(ctx context.Context, rdb *redis.Client) error {
		return rdb.ClientPause(ctx, d).Err()
	})
	if err != nil {
		tb.Fatalf("redistest: pause %s: %v", s.Addr, err)
	}
}

func (s *Server) signal(tb testing.TB, what string, sig func() os.Signal) {
	tb.Helper()
	s.refuseShared(tb, what)
	if sig() == nil {
		tb.Fatalf("redistest: %s is not supported on this operating system", what)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		tb.Fatalf("redistest: %s %s: server is not running", what, s.Addr)
	}
	if err := s.proc.cmd.Process.Signal(sig()); err != nil {
		tb.Fatalf("redistest: %s %s: %v", what, s.Addr, err)
	}
}

// running reports whether the process of s is alive (started and not yet
// exited).
func (s *Server) running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return false
	}
	select {
	case <-s.proc.done:
		return false
	default:
		return true
	}
}

// pid returns the process ID of the running process, or 0.
func (s *Server) pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return 0
	}
	return s.proc.cmd.Process.Pid
}

// stop is the cleanup of a Server: kill, ignoring errors (there is nobody
// left to report them to but the log).
func (s *Server) stop() { _ = s.kill() }

// startServer starts a server with its files in dir. nextPort picks the
// port; a start that loses a race for the port is retried on a new one.
func startServer(dir string, extraArgs []string, nextPort func() (int, error), clusterArgs ...string) (*Server, error) {
	return launchOnFreePort(nextPort, filepath.Join(dir, "redis.log"), func(port string) []string {
		args := []string{
			"--port", port,
			"--bind", "127.0.0.1",
			"--save", "",
			"--appendonly", "no",
			"--dir", dir,
		}
		args = append(args, clusterArgs...)
		return append(args, extraArgs...)
	})
}

// launchOnFreePort launches redis-server with the arguments args returns
// for a port nextPort picks, logging to logPath; a launch that loses a race
// for the port is retried on a new one.
func launchOnFreePort(nextPort func() (int, error), logPath string, args func(port string) []string) (*Server, error) {
	bin, err := redisServerPath()
	if err != nil {
		return nil, err
	}
	for attempt := 1; ; attempt++ {
		port, err := nextPort()
		if err != nil {
			return nil, err
		}
		p := strconv.Itoa(port)
		s := &Server{Addr: net.JoinHostPort("127.0.0.1", p), bin: bin, logPath: logPath, args: args(p)}
		err = s.launch()
		if err == nil {
			return s, nil
		}
		if !errors.Is(err, errPortInUse) || attempt == portAttempts {
			return nil, err
		}
	}
}

// launch starts the process of s and waits until it answers.
func (s *Server) launch() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		return fmt.Errorf("%s is already running", s.Addr)
	}
	log, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("open redis-server log: %w", err)
	}
	offset, err := log.Seek(0, io.SeekEnd)
	if err != nil {
		_ = log.Close()
		return fmt.Errorf("open redis-server log: %w", err)
	}
	cmd := exec.Command(s.bin, s.args...)
	cmd.Stdout = log
	cmd.Stderr = log
	setDeathSignal(cmd)
	if err := cmd.Start(); err != nil {
		_ = log.Close()
		return fmt.Errorf("start %s: %w", s.bin, err)
	}
	p := &process{cmd: cmd, log: log, logOffset: offset, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	if err := p.waitReady(s.Addr, s.logPath); err != nil {
		_ = cmd.Process.Kill()
		<-p.done
		_ = log.Close()
		return err
	}
	s.proc = p
	return nil
}

// kill stops the process of s, if any, and waits for it.
func (s *Server) kill() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.proc
	if p == nil {
		return nil
	}
	s.proc = nil
	defer p.log.Close()
	// SIGKILL also ends a process stopped by Freeze.
	if err := p.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(startTimeout):
		return fmt.Errorf("redis-server pid %d did not exit after SIGKILL", p.cmd.Process.Pid)
	}
}

// waitReady polls addr until the server there is this process and answers
// INFO, the process exits, or startTimeout passes.
func (p *process) waitReady(addr, logPath string) error {
	deadline := time.Now().Add(startTimeout)
	pause := 2 * time.Millisecond
	var lastErr error
	for {
		select {
		case <-p.done:
			tail := p.logTail(logPath)
			err := fmt.Errorf("redis-server on %s exited during start (%v); its output:\n%s", addr, p.waitErr, tail)
			if strings.Contains(tail, "already in use") {
				return fmt.Errorf("%w: %w", errPortInUse, err)
			}
			return err
		default:
		}
		pid, err := probe(addr, time.Second)
		if err == nil && pid == p.cmd.Process.Pid {
			return nil
		}
		if err == nil {
			// Another server answered on our port: we lost a race for it
			// and our process is about to exit; keep waiting for that.
			err = fmt.Errorf("%s is served by pid %d, not ours (%d)", addr, pid, p.cmd.Process.Pid)
		}
		lastErr = err
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server on %s not ready after %v: %v; its output:\n%s", addr, startTimeout, lastErr, p.logTail(logPath))
		}
		time.Sleep(pause)
		pause = min(2*pause, 50*time.Millisecond)
	}
}

// logTail returns the end of this run's output, for error messages.
func (p *process) logTail(logPath string) string {
	const maxTail = 4 << 10
	f, err := os.Open(logPath)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", logPath, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.NewSectionReader(f, p.logOffset, 1<<30))
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", logPath, err)
	}
	if len(b) > maxTail {
		b = b[len(b)-maxTail:]
	}
	return strings.TrimSpace(string(b))
}

// probe asks the server at addr for INFO server over a fresh connection and
// returns its process_id. It speaks RESP directly: a go-redis client backs
// off after failed dials, which would slow the start down.
func probe(addr string, timeout time.Duration) (int, error) {
	conn, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(timeout)); err != nil {
		return 0, err
	}
	if _, err := io.WriteString(conn, "*2\r\n$4\r\nINFO\r\n$6\r\nserver\r\n"); err != nil {
		return 0, err
	}
	r := bufio.NewReader(conn)
	line, err := r.ReadString('\n')
	if err != nil {
		return 0, err
	}
	line = strings.TrimRight(line, "\r\n")
	if !strings.HasPrefix(line, "$") {
		return 0, fmt.Errorf("INFO server: unexpected reply %q", line)
	}
	n, err := strconv.Atoi(line[1:])
	if err != nil || n < 0 {
		return 0, fmt.Errorf("INFO server: unexpected reply %q", line)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return 0, err
	}
	v, ok := infoField(string(body), "process_id")
	if !ok {
		return 0, errors.New("INFO server: no process_id")
	}
	return strconv.Atoi(v)
}

// infoField returns the value of name in the text of INFO or CLUSTER INFO.
func infoField(info, name string) (string, bool) {
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && k == name {
			return v, true
		}
	}
	return "", false
}

// freePort returns a 127.0.0.1 port that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// redisServerPath finds the redis-server binary.
func redisServerPath() (string, error) {
	name := "redis-server"
	if env := os.Getenv("SLUICE_REDIS_SERVER"); env != "" {
		name = env
	}
	path, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("%w: %w", errNotInstalled, err)
	}
	return path, nil
}

// inCI reports whether the environment variable CI is set to true.
func inCI() bool {
	ci, err := strconv.ParseBool(os.Getenv("CI"))
	return err == nil && ci
}

// failStart ends the test after a failed start: a skip when redis-server is
// missing outside CI, a failure otherwise.
func failStart(tb testing.TB, err error) {
	tb.Helper()
	if errors.Is(err, errNotInstalled) && !inCI() {
		tb.Skipf("redistest: %v (install the Debian package redis-server; with CI=true this is a failure)", err)
	}
	tb.Fatalf("redistest: %v", err)
}

// adminTimeout bounds each administrative command.
const adminTimeout = 5 * time.Second

// withAdmin runs f with a short-lived client for addr that neither retries
// nor backs off, so a dead node answers with an error at once.
func withAdmin(addr string, f func(context.Context, *redis.Client) error) error {
	rdb := redis.NewClient(&redis.Options{
		Addr:            addr,
		Protocol:        2,
		DisableIdentity: true,
		MaxRetries:      -1,
		DialerRetries:   1,
		DialTimeout:     time.Second,
		ReadTimeout:     adminTimeout,
		WriteTimeout:    adminTimeout,
		PoolSize:        1,
	})
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
	defer cancel()
	return f(ctx, rdb)
}
