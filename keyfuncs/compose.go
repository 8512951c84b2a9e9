package keyfuncs

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/core"
)

// Join returns a KeyFunc whose key combines the keys of every fn, for
// instance a limit per user per route: Join(user, Route()).
//
// The encoding is injective: each part is written as its length in bytes,
// a colon and the part, parts separated by "|" ("3:abc|5:de:fg"). No choice
// of part values can imitate another, so ("a:b", "c") and ("a", "b:c") get
// different keys, whatever separators the parts contain.
//
// Every fn must succeed: the first error is returned, wrapped, so an
// errors.Is(err, core.ErrNoKey) test still sees it. A part that returns an
// empty key without error is treated as a missing identity (an error
// wrapping core.ErrNoKey). Join without functions, or with a nil one,
// returns a KeyFunc that always fails. The returned KeyFunc is safe for
// concurrent use if every fn is.
func Join(fns ...core.KeyFunc) core.KeyFunc {
	fns = append([]core.KeyFunc(nil), fns...)
	return func(r *http.Request) (string, error) {
		if len(fns) == 0 {
			return "", errors.New("keyfuncs: Join without key functions")
		}
		var b strings.Builder
		for i, fn := range fns {
			if fn == nil {
				return "", fmt.Errorf("keyfuncs: Join: key function %d is nil", i)
			}
			k, err := fn(r)
			if err != nil {
				return "", fmt.Errorf("keyfuncs: Join part %d: %w", i, err)
			}
			if k == "" {
				return "", fmt.Errorf("keyfuncs: Join part %d returned an empty key: %w", i, core.ErrNoKey)
			}
			if i > 0 {
				b.WriteByte('|')
			}
			b.WriteString(strconv.Itoa(len(k)))
			b.WriteByte(':')
			b.WriteString(k)
		}
		return b.String(), nil
	}
}

// Fallback returns a KeyFunc that tries each fn in order and keys the
// request by the first that succeeds, for instance the user of a verified
// token, else the IP address: Fallback(jwtKey, ipKey).
//
// The key is prefixed by the index of the source that produced it and a
// colon: "0:alice" from the first source, "1:203.0.113.7" from the second.
// Keys from different sources never collide, so a user named "203.0.113.7"
// does not share the bucket of that address. Reordering the sources
// changes every key (and so starts fresh allowances).
//
// Any error moves on to the next source, not only core.ErrNoKey. In
// particular a request with a forged, expired or otherwise invalid token
// falls through to the next source: its sender gains nothing, since it gets
// the allowance of, say, its own IP address, not the user's it claimed.
// A Limiter that wants to refuse invalid tokens outright should use the JWT
// KeyFunc on its own. An empty key counts as a failure (core.ErrNoKey).
//
// When every source fails, the error lists them all. It wraps core.ErrNoKey
// only when every failure did (the request is anonymous to every source);
// otherwise it wraps the failures that were not core.ErrNoKey, such as
// ErrInvalidToken. Fallback without functions, or with a nil one, returns a
// KeyFunc that always fails. The returned KeyFunc is safe for concurrent use
// if every fn is.
func Fallback(fns ...core.KeyFunc) core.KeyFunc {
	fns = append([]core.KeyFunc(nil), fns...)
	return func(r *http.Request) (string, error) {
		if len(fns) == 0 {
			return "", errors.New("keyfuncs: Fallback without key functions")
		}
		errs := make([]error, 0, len(fns))
		for i, fn := range fns {
			if fn == nil {
				return "", fmt.Errorf("keyfuncs: Fallback: key function %d is nil", i)
			}
			k, err := fn(r)
			if err == nil && k == "" {
				err = fmt.Errorf("keyfuncs: empty key: %w", core.ErrNoKey)
			}
			if err == nil {
				return strconv.Itoa(i) + ":" + k, nil
			}
			errs = append(errs, fmt.Errorf("source %d: %w", i, err))
		}
		return "", newFallbackError(errs)
	}
}

// fallbackError is the error of a Fallback whose sources all failed.
type fallbackError struct {
	all     []error // every source's error, for the message
	wrapped []error // what Unwrap exposes
}

func newFallbackError(errs []error) error {
	e := &fallbackError{all: errs}
	for _, err := range errs {
		if !errors.Is(err, core.ErrNoKey) {
			e.wrapped = append(e.wrapped, err)
		}
	}
	if len(e.wrapped) == 0 {
		e.wrapped = errs
	}
	return e
}

func (e *fallbackError) Error() string {
	var b strings.Builder
	b.WriteString("keyfuncs: no source identified the request")
	for _, err := range e.all {
		b.WriteString("; ")
		b.WriteString(err.Error())
	}
	return b.String()
}

func (e *fallbackError) Unwrap() []error { return e.wrapped }
