//go:build unix

package main

import (
	"context"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestReloadOnSIGHUP sends the test process a real SIGHUP, with the
// reloader listening as main sets it up; the file changes but keeps its
// modification time and size, so only the signal can tell.
func TestReloadOnSIGHUP(t *testing.T) {
	f := newFixture(t, "2/m\n")
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); f.r.run(ctx, time.Hour, hup) }()
	defer func() { cancel(); <-done }()

	f.mtime = f.mtime.Add(-time.Second) // write keeps the same mtime
	f.write("7/m\n")
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	f.waitPolicy(`"api";q=7;w=60`)
	if logs := f.waitLogs(`trigger=hangup`, `from=[2/m] to=[7/m]`); !strings.Contains(logs, `trigger=hangup`) || !strings.Contains(logs, `from=[2/m] to=[7/m]`) {
		t.Fatalf("logs:\n%s", logs)
	}
}
