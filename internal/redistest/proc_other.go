//go:build !linux

package redistest

import (
	"os"
	"os/exec"
)

// setDeathSignal does nothing outside Linux: processes are killed at
// tb.Cleanup only, and outlive a test binary that is killed.
func setDeathSignal(*exec.Cmd) {}

func stopSignal() os.Signal     { return nil }
func continueSignal() os.Signal { return nil }

// processGone cannot tell outside Linux; stale directories are kept.
func processGone(int) bool { return false }
