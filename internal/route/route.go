// Package route gives the gin and echo adapters ServeMux's form of a
// matched route, so that both set Request.Pattern alike.
package route

import "github.com/sluicehq/sluice/internal/cowmap"

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

// maxCached is how many patterns a Cache keeps; patterns past it are
// built anew on each request.
const maxCached = 1024

// Cache keeps the patterns of an adapter's routes, so that a request on a
// route seen before builds none (an allocation per request otherwise). Its
// zero value is empty and ready; it is safe for concurrent use. Routers
// give a finite set of template paths, and the Cache keeps maxCached
// patterns at most whatever they give.
type Cache struct {
	m cowmap.Map[methodPath, string]
}

type methodPath struct{ method, path string }

// Pattern returns Pattern(method, path), from the cache when it holds it.
func (c *Cache) Pattern(method, path string) string {
	if path == "" {
		return ""
	}
	k := methodPath{method, path}
	if p, ok := c.m.Get(k); ok {
		return p
	}
	return c.m.Add(k, Pattern(method, path), maxCached)
}
