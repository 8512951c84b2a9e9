package main

import (
	"fmt"
	"net/http"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/exampleenv"
	"github.com/sluicehq/sluice/nethttp"
)

// routes returns the server's routes, limited by api (10 per second and
// 1000 per hour per client IP) and login (5 per minute, then 15 minutes
// locked out); see exampleenv.Limiters.
func routes(api, login *core.Limiter) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /api/items/{id}", nethttp.Middleware(api)(http.HandlerFunc(
		func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "item %s\n", r.PathValue("id"))
		})))
	mux.Handle("POST /login", nethttp.Middleware(login)(http.HandlerFunc(
		func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintln(w, "welcome")
		})))
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	return mux
}

func main() {
	// -addr, and -redis: without it the store is memorystore.New(),
	// with it redisstore.New(redis.NewClient(opt)), opt from
	// redisstore.ParseURL. Serves until SIGINT or SIGTERM, then shuts
	// down gracefully.
	exampleenv.Run(routes)
}
