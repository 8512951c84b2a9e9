//go:build linux

package redistest

import (
	"errors"
	"os"
	"os/exec"
	"syscall"
)

// setDeathSignal makes the kernel kill cmd's process when the test binary
// dies, whatever the way (exit, panic, -timeout, SIGKILL). Strictly, the
// parent-death signal fires when the OS thread that started the child ends;
// the Go runtime ends a thread before the process only when a goroutine
// that called runtime.LockOSThread returns without unlocking it, which
// nothing in sluice's tests does.
func setDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

func stopSignal() os.Signal     { return syscall.SIGSTOP }
func continueSignal() os.Signal { return syscall.SIGCONT }

// processGone reports whether no process with this pid is alive.
func processGone(pid int) bool {
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}
