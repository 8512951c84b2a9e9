package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisServer is a redis-server child process listening on a free loopback
// port, with persistence off. kill is safe to call more than once and from
// any goroutine.
type redisServer struct {
	addr    string
	cmd     *exec.Cmd
	logTail tailBuffer
	version string

	once sync.Once
	done chan struct{}
}

// freePort asks the kernel for an unused loopback port. It refuses 6379 so
// that the system Redis can never be picked by accident.
func freePort() (int, error) {
	for range 10 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("find a free port: %w", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if port != 6379 {
			return port, nil
		}
	}
	return 0, errors.New("find a free port: only 6379 was offered")
}

// startRedis starts binary, run by the command wrap when given (valgrind
// and its options: see callgrind.go), and waits until it answers.
func startRedis(binary string, wrap ...string) (*redisServer, error) {
	path, err := exec.LookPath(binary)
	if err != nil {
		return nil, fmt.Errorf("redis-server not found (install it, or pass -redis-server): %w", err)
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	// Persistence is off, so the server writes no file: nothing is left
	// behind even when this process is killed. Its log stays in memory.
	s := &redisServer{addr: "127.0.0.1:" + strconv.Itoa(port), done: make(chan struct{})}
	argv := append(wrap[:len(wrap):len(wrap)], path,
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", os.TempDir(),
		"--daemonize", "no", "--loglevel", "warning", "--logfile", "")
	s.cmd = exec.Command(argv[0], argv[1:]...)
	s.cmd.SysProcAttr = childAttrs() // dies with this process (Linux)
	s.cmd.Stdout, s.cmd.Stderr = &s.logTail, &s.logTail
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start redis-server: %w", err)
	}
	go func() { s.cmd.Wait(); close(s.done) }()

	c := redis.NewClient(&redis.Options{Addr: s.addr, DisableIdentity: true, MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	if len(wrap) > 0 {
		deadline = deadline.Add(50 * time.Second) // valgrind starts it slowly
	}
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			break
		}
		select {
		case <-s.done:
			log := s.log()
			s.kill()
			return nil, fmt.Errorf("redis-server on %s exited at start: %w\n%s", s.addr, err, log)
		default:
		}
		if time.Now().After(deadline) {
			log := s.log()
			s.kill()
			return nil, fmt.Errorf("redis-server on %s not ready after 10s: %w\n%s", s.addr, err, log)
		}
		time.Sleep(20 * time.Millisecond)
	}
	info, err := c.Info(context.Background(), "server").Result()
	if err == nil {
		s.version = infoFields(info)["redis_version"]
	}
	return s, nil
}

// log returns the end of the server's log, for error messages.
func (s *redisServer) log() string { return s.logTail.String() }

// tailBuffer keeps the last 4 KiB written to it; safe for concurrent use.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - 4096; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}

// kill stops the server with SIGKILL and waits for it.
func (s *redisServer) kill() {
	s.once.Do(func() {
		if s.cmd.Process != nil {
			s.cmd.Process.Kill()
			select {
			case <-s.done:
			case <-time.After(5 * time.Second):
			}
		}
	})
}

// infoFields parses the "name:value" lines of an INFO reply.
func infoFields(info string) map[string]string {
	m := make(map[string]string)
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		if k, v, ok := strings.Cut(line, ":"); ok {
			m[k] = v
		}
	}
	return m
}

// redisStats is a snapshot of the counters a case reports per decision.
type redisStats struct {
	cpu   float64          // used_cpu_sys + used_cpu_user, seconds
	calls map[string]int64 // commandstats calls by command (lower case)
	usec  map[string]int64 // commandstats usec (time inside the command) by command
}

// snapshot reads INFO cpu and INFO commandstats.
func snapshot(ctx context.Context, c *redis.Client) (redisStats, error) {
	info, err := c.Info(ctx, "cpu", "commandstats").Result()
	if err != nil {
		return redisStats{}, fmt.Errorf("INFO: %w", err)
	}
	f := infoFields(info)
	sys, err1 := strconv.ParseFloat(f["used_cpu_sys"], 64)
	user, err2 := strconv.ParseFloat(f["used_cpu_user"], 64)
	if err := errors.Join(err1, err2); err != nil {
		return redisStats{}, fmt.Errorf("INFO cpu: %w", err)
	}
	st := redisStats{cpu: sys + user, calls: make(map[string]int64), usec: make(map[string]int64)}
	for k, v := range f {
		name, ok := strings.CutPrefix(k, "cmdstat_")
		if !ok {
			continue
		}
		// calls=12,usec=34,usec_per_call=2.83,rejected_calls=0,failed_calls=0
		for _, kv := range strings.Split(v, ",") {
			field, n, _ := strings.Cut(kv, "=")
			if field != "calls" && field != "usec" {
				continue
			}
			x, err := strconv.ParseInt(n, 10, 64)
			if err != nil {
				return redisStats{}, fmt.Errorf("INFO commandstats %s: %w", k, err)
			}
			if field == "calls" {
				st.calls[name] = x
			} else {
				st.usec[name] = x
			}
		}
	}
	return st, nil
}

// benchOverhead lists the commands the harness itself sends while measuring.
var benchOverhead = map[string]bool{"info": true, "config|resetstat": true, "config": true}
