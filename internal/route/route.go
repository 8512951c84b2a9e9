// Package route gives the gin and echo adapters ServeMux's form of a
// matched route, so that both set Request.Pattern alike.
package route

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
