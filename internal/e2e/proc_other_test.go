//go:build !linux

package e2e

import (
	"os/exec"
	"time"
)

func setDeathSignal(*exec.Cmd) {}

// selfCPU is not measured here.
func selfCPU() time.Duration { return 0 }
