//go:build unix

package redisstore

import (
	"syscall"
	"time"
)

// processCPU is the user+system CPU time this process has used (its
// children, such as a redis-server started by a test, excluded).
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
