//go:build !(linux && amd64)

package core

import "time"

// wallMicros returns the wall clock in µs since the Unix epoch.
func wallMicros() int64 { return time.Now().UnixMicro() }
