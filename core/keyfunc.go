package core

import (
	"errors"
	"net/http"
)

// KeyFunc identifies the client of a request: requests with the same key
// share one allowance. It returns an error (wrapping ErrNoKey when nothing
// is wrong but the request carries no identity) when it cannot tell; the
// Limiter then follows its key-error rule, it never skips limiting silently.
// An error wrapping ErrInvalidOption says the key function cannot work
// where it is used (keyfuncs.Route outside the router): whatever the rule,
// the request is refused with 500 and the mistake logged at level Error.
// Package keyfuncs provides the usual ones.
type KeyFunc func(r *http.Request) (string, error)

// ErrNoKey means a request carries no identity for a KeyFunc: no header,
// no token, no address.
var ErrNoKey = errors.New("sluice: request has no key")
