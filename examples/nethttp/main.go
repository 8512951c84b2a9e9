package main

import (
	"fmt"
	"log"
	"net/http"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/exampleenv"
	"github.com/sluicehq/sluice/nethttp"
)

// newHandler returns the server's routes, their limiters keeping state in
// store.
func newHandler(store core.Store) (http.Handler, error) {
	// api: 10 per second and 1000 per hour per client IP; login: 5 per
	// minute, then 15 minutes locked out. See exampleenv.Limiters.
	api, login, err := exampleenv.Limiters(store)
	if err != nil {
		return nil, err
	}

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
	return mux, nil
}

func main() {
	// -addr, and -redis: without it the store is core.NewMemoryStore(),
	// with it redisstore.New(redis.NewClient(opt)), opt from
	// redisstore.ParseURL.
	env := exampleenv.Parse()
	handler, err := newHandler(env.Store)
	if err != nil {
		log.Fatal(err)
	}
	env.Serve(handler) // until SIGINT or SIGTERM, then a graceful shutdown
}
