//go:build race

package e2e

// raceEnabled reports whether the test binary runs under the race
// detector; the demo is then built with -race too, which reuses the
// packages the test build compiled and checks the demo under load.
const raceEnabled = true
