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
	sharedServer struct {
		once sync.Once
		srv  *Server
		err  error
	}
	sharedCluster struct {
		once sync.Once
		c    *Cluster
		err  error
	}
)

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
	sharedServer.once.Do(func() {
		var dir string
		dir, sharedServer.err = sharedDir()
		if sharedServer.err == nil {
			sharedServer.srv, sharedServer.err = startServer(dir, nil, freePort)
		}
		if sharedServer.srv != nil {
			sharedServer.srv.shared = true
		}
	})
	if sharedServer.err != nil {
		failStart(tb, fmt.Errorf("shared server: %w", sharedServer.err))
	}
	return sharedServer.srv
}

// SharedCluster returns the Redis Cluster of 3 masters without replicas
// shared by every test of this test binary, started by the first call. Its
// lifetime and failure rules are those of Shared; its nodes refuse Kill,
// Restart, Pause and Freeze, and it refuses Failover.
func SharedCluster(tb testing.TB) *Cluster {
	tb.Helper()
	sharedCluster.once.Do(func() {
		var dir string
		dir, sharedCluster.err = sharedDir()
		if sharedCluster.err == nil {
			sharedCluster.c, sharedCluster.err = startCluster(dir, 3, 0, true)
		}
	})
	if sharedCluster.err != nil {
		failStart(tb, fmt.Errorf("shared cluster: %w", sharedCluster.err))
	}
	return sharedCluster.c
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
