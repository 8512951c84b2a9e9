package redistest

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// sharedDirPrefix names the working directories of shared processes; the
// test binary's pid follows, so stale ones can be told apart.
const sharedDirPrefix = "sluice-redistest-"

var (
	sharedServer  shared[*Server]
	sharedCluster shared[*Cluster]
)

// shared is a process (or processes) started once per test binary, with
// the error of that start.
type shared[T any] struct {
	once sync.Once
	v    T
	err  error
}

// get returns what start started in a shared working directory, starting
// it on the first call. When that start failed, every call ends the test
// as failStart does, with the error prefixed by what.
func (sh *shared[T]) get(tb testing.TB, what string, start func(dir string) (T, error)) T {
	tb.Helper()
	sh.once.Do(func() {
		var dir string
		if dir, sh.err = sharedDir(); sh.err == nil {
			sh.v, sh.err = start(dir)
		}
	})
	if sh.err != nil {
		failStart(tb, fmt.Errorf("%s: %w", what, sh.err))
	}
	return sh.v
}

// Shared returns the redis-server shared by every test of this test binary,
// started by the first call. Tests sharing it must not rely on an empty
// database: keys of their own (or FLUSHALL in a test that runs alone) are
// the caller's business. Kill, Restart, Pause and Freeze of it fail the
// test; use StartServer for those.
//
// The process is not stopped by any tb.Cleanup: it lives until the test
// binary exits and is then killed by its parent-death signal (Linux). If
// the first start failed, every call fails (or skips, when redis-server is
// not installed outside CI) with that start's error.
func Shared(tb testing.TB) *Server {
	tb.Helper()
	return sharedServer.get(tb, "shared server", func(dir string) (*Server, error) {
		s, err := startServer(dir, nil, freePort)
		if s != nil {
			s.shared = true
		}
		return s, err
	})
}

// SharedCluster returns the Redis Cluster of 3 masters without replicas
// shared by every test of this test binary, started by the first call. Its
// lifetime and failure rules are those of Shared; its nodes refuse Kill,
// Restart, Pause and Freeze, and it refuses Failover.
func SharedCluster(tb testing.TB) *Cluster {
	tb.Helper()
	return sharedCluster.get(tb, "shared cluster", func(dir string) (*Cluster, error) {
		return startCluster(dir, 3, 0, true)
	})
}

// sharedDir creates a working directory for a shared process under
// os.TempDir, after removing those left by test binaries that are gone (a
// shared process outlives every tb.TempDir).
func sharedDir() (string, error) {
	removeStaleSharedDirs()
	dir, err := os.MkdirTemp("", sharedDirPrefix+strconv.Itoa(os.Getpid())+"-")
	if err != nil {
		return "", fmt.Errorf("create working directory: %w", err)
	}
	return dir, nil
}

func removeStaleSharedDirs() {
	matches, _ := filepath.Glob(filepath.Join(os.TempDir(), sharedDirPrefix+"*-*"))
	for _, dir := range matches {
		rest := strings.TrimPrefix(filepath.Base(dir), sharedDirPrefix)
		pidText, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidText)
		if err != nil || pid <= 0 || pid == os.Getpid() || !processGone(pid) {
			continue
		}
		_ = os.RemoveAll(dir)
	}
}
