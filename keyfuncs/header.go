package keyfuncs

import (
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"

	"github.com/sluicehq/sluice/core"
)

// defaultHeaderMaxLength is the longest header value Header accepts as a key
// unless WithMaxLength says otherwise.
const defaultHeaderMaxLength = 512

// HeaderOption configures Header.
type HeaderOption interface{ apply(*headerConfig) }

// headerOptionFunc adapts a function to HeaderOption.
type headerOptionFunc func(*headerConfig)

func (f headerOptionFunc) apply(c *headerConfig) { f(c) }

type headerConfig struct {
	maxLength int
}

// WithMaxLength sets the longest value, in bytes, that Header accepts as a
// key (n > 0); a longer value is an error. The default is 512. The bound
// keeps storage keys small whatever a client sends.
func WithMaxLength(n int) HeaderOption {
	return headerOptionFunc(func(c *headerConfig) { c.maxLength = n })
}

// Header returns a KeyFunc that keys requests by the value of the header
// name, for instance an API key in "X-API-Key". The value is used verbatim
// (net/http has already trimmed surrounding whitespace); it is the client's
// own claim, unverified, so use Header only for values checked elsewhere or
// where a client choosing its key does no harm.
//
// A missing or empty header is an error wrapping core.ErrNoKey. A header
// sent on several lines (ambiguous) or longer than the maximum length is
// another error. Header returns an error for an invalid header name or
// maximum length. The returned KeyFunc is safe for concurrent use.
func Header(name string, opts ...HeaderOption) (core.KeyFunc, error) {
	cfg := headerConfig{maxLength: defaultHeaderMaxLength}
	for _, opt := range opts {
		if opt != nil {
			opt.apply(&cfg)
		}
	}
	if !validHeaderName(name) {
		return nil, fmt.Errorf("keyfuncs: invalid header name %q", name)
	}
	if cfg.maxLength <= 0 {
		return nil, fmt.Errorf("keyfuncs: header max length %d, want > 0", cfg.maxLength)
	}
	name = http.CanonicalHeaderKey(name)
	maxLength := cfg.maxLength
	return func(r *http.Request) (string, error) {
		if r == nil {
			return "", errNilRequest
		}
		values := r.Header[name] // name is canonical: Values would make it so again
		switch {
		case len(values) == 0 || len(values) == 1 && values[0] == "":
			return "", fmt.Errorf("keyfuncs: no %s header: %w", name, core.ErrNoKey)
		case len(values) > 1:
			return "", fmt.Errorf("keyfuncs: %s: %d header lines, want one", name, len(values))
		case len(values[0]) > maxLength:
			return "", fmt.Errorf("keyfuncs: %s: value of %d bytes exceeds the maximum of %d", name, len(values[0]), maxLength)
		}
		return values[0], nil
	}, nil
}

// errNoPattern is wrapped by Route's error for a request without a pattern.
var errNoPattern = errors.New("keyfuncs: route key empty: no route serves the request's method and path")

// errOutsideRouter is wrapped by Route's error while no request has had a
// pattern.
var errOutsideRouter = errors.New("keyfuncs: route key empty and no request has had a route pattern: " +
	"the middleware wraps the router instead of the routes (r.Pattern is set only inside it)")

// Route returns a KeyFunc that keys requests by their route template, the
// pattern that matched them, so that every URL of one route shares a limit:
// "/users/1" and "/users/2" both key as "GET /users/{id}". The pattern is
// kept whole, method and host included, as registered.
//
// The template is read from r.Pattern, which http.ServeMux (Go 1.22+) sets
// before calling the handler. Other routers must set it before the KeyFunc
// runs; sluice's adapters do, with the method as ServeMux has it: ginlimit
// sets "GET /users/:id" from the method and gin's c.FullPath(), echolimit
// from the method and echo's c.Path(). So GET and POST on one route have
// their own keys (with ServeMux, when registered with their methods). A
// method the router does not serve sets no pattern (ServeMux and gin
// answer 405 or 404 without one; echolimit leaves it empty on echo's 405),
// so a client cannot make a key per invented method. Route never falls
// back to the raw URL path, which would give each URL its own limit.
//
// A request without a pattern is an error. While no request has had one,
// the middleware is taken to wrap the router rather than its routes (a
// mistake that would limit the whole site per address): the error wraps
// core.ErrInvalidOption, and the Limiter refuses the request with 500 and
// logs the mistake at level Error. Once a request has had a pattern, the
// error of one without (no route matched) wraps core.ErrNoKey, and the
// Limiter's key-error rule applies (by default, a bucket per client
// address).
//
// Each KeyFunc Route returns remembers for itself whether it has seen a
// pattern. It is safe for concurrent use.
func Route() core.KeyFunc {
	var seen atomic.Bool
	return func(r *http.Request) (string, error) {
		switch {
		case r == nil:
			return "", errNilRequest
		case r.Pattern != "":
			if !seen.Load() {
				seen.Store(true)
			}
			return r.Pattern, nil
		case !seen.Load():
			return "", fmt.Errorf("%w: %w", errOutsideRouter, core.ErrInvalidOption)
		}
		return "", fmt.Errorf("%w: %w", errNoPattern, core.ErrNoKey)
	}
}
