package core

import (
	"context"
	"errors"
	"time"
)

// Result is the outcome of Store.Take. With several limits it describes the
// binding one: when denied, the denying limit with the longest RetryAfter;
// when allowed, the limit with the least Remaining (the first on ties).
// PerLimit then holds every limit's own Result, in the order given.
type Result struct {
	Allowed    bool
	Limit      int64         // the figure for X-RateLimit-Limit
	Remaining  int64         // the figure for X-RateLimit-Remaining
	RetryAfter time.Duration // 0 when allowed; InfDuration when this cost can never pass
	ResetAfter time.Duration // until the key is back to its full allowance
	Delay      time.Duration // LeakyBucket only: how long to hold the request before serving it

	// Binding is the index, in the limits passed to Take, of the limit this
	// Result describes.
	Binding int
	// PerLimit holds one Result per limit when Take was given more than
	// one (their own PerLimit is nil); nil for a single limit.
	PerLimit []Result
}

// Store decides and records rate-limit state. Implementations must be safe
// for concurrent use and decide atomically.
type Store interface {
	// Take charges n (n == 0 peeks) against every limit for key atomically:
	// either all allow and all are charged, or none is charged.
	Take(ctx context.Context, key string, n int64, limits ...Limit) (Result, error)
}

// Errors a Store returns for bad input. They are wrapped with context; test
// with errors.Is.
var (
	ErrEmptyKey     = errors.New("sluice: empty key")
	ErrNegativeCost = errors.New("sluice: negative cost")
	ErrNoLimits     = errors.New("sluice: no limits")
)
