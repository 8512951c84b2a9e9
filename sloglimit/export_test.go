package sloglimit

// WithClock is withClock, for the tests.
var WithClock = withClock
