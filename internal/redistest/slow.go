package redistest

import (
	"os"
	"strconv"
	"testing"
)

// SlowSkipMessage is what Slow says when it skips a test.
const SlowSkipMessage = "slow test: set SLUICE_FULL=1 (CI sets CI=true) to run it"

// Full reports whether the slow tests run: the fault-injection and
// end-to-end tests, and the real-Redis tests that take seconds or depend on
// timing (breakers opening on a stopped server, cluster resharding and
// failover, Sentinel, stalls). They run when the environment variable CI is
// true (.ci/run sets it) or SLUICE_FULL is 1 (any value strconv.ParseBool
// takes as true); the default go test ./... leaves them out, so that it
// passes within minutes on a busy laptop.
func Full() bool {
	if inCI() {
		return true
	}
	full, err := strconv.ParseBool(os.Getenv("SLUICE_FULL"))
	return err == nil && full
}

// Slow skips the test, saying how to run it, unless Full. Under CI=true it
// never skips, so a CI run never passes by leaving out a slow test.
func Slow(tb testing.TB) {
	tb.Helper()
	if !Full() {
		tb.Skip(SlowSkipMessage)
	}
}
