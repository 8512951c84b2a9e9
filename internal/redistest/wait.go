package redistest

import "time"

// WaitUntil polls cond every 10 ms until it holds, and reports whether it
// did within the given time: what a test waits for to have happened (a
// server to apply a change, a background pass to finish), instead of a
// sleep that guesses how long it takes on a machine of unknown load.
func WaitUntil(within time.Duration, cond func() bool) bool {
	for deadline := time.Now().Add(within); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			return cond()
		}
	}
	return true
}
