//go:build linux

package e2e

import (
	"os/exec"
	"syscall"
)

// setDeathSignal makes the kernel kill a demo process when the test binary
// dies, however it dies (see internal/redistest).
func setDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
