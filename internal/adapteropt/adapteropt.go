// Package adapteropt is the option plumbing the framework adapters
// (nethttp, ginlimit, echolimit) share. Each adapter has the same options
// (so far one, OnRefuse) in its framework's types: it declares its Option
// as an alias of Option[F], F its refusal handler's type, and wraps
// OnRefuse with its own documentation.
package adapteropt

// An Option configures an adapter whose refusal handler has type F.
type Option[F any] interface{ apply(*Config[F]) }

// Config is what an adapter's options set.
type Config[F any] struct {
	// OnRefuse, if not nil, answers a refused request instead of the
	// Limiter's response.
	OnRefuse F
}

// onRefuse is the Option OnRefuse returns.
type onRefuse[F any] struct{ f F }

//lint:ignore U1000 called through Option[F] in Apply; staticcheck misses methods of generic types that implement generic interfaces (dominikh/go-tools#1440)
func (o onRefuse[F]) apply(c *Config[F]) { c.OnRefuse = o.f }

// OnRefuse returns the Option that sets Config.OnRefuse to f.
func OnRefuse[F any](f F) Option[F] { return onRefuse[F]{f} }

// Apply returns the Config opts make, applied in order; nil options are
// skipped.
func Apply[F any](opts []Option[F]) Config[F] {
	var c Config[F]
	for _, opt := range opts {
		if opt != nil {
			opt.apply(&c)
		}
	}
	return c
}

// Pattern returns the route pattern of a request with method matched by a
// router's template path ("/users/:id"), in http.ServeMux's form: "GET
// /users/:id". The gin and echo adapters set it as Request.Pattern, so
// that a route key tells the methods of one route apart, as ServeMux's
// patterns do; an empty path (no route matched) gives "".
func Pattern(method, path string) string {
	if path == "" {
		return ""
	}
	return method + " " + path
}
