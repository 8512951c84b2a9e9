package main

import (
	"fmt"
	"log"
	"net/http"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/exampleenv"
	"github.com/sluicehq/sluice/keyfuncs"
	"github.com/sluicehq/sluice/nethttp"
)

// newHandler returns the server's routes, their limiters keeping state in
// store.
func newHandler(store core.Store) (http.Handler, error) {
	// The client is the peer address. Behind a load balancer, name it with
	// keyfuncs.WithTrustedProxies, or every client shares its address.
	clientIP, err := keyfuncs.IP()
	if err != nil {
		return nil, err
	}
	// Each route gets its own limiter; the name keeps their counters apart.
	api, err := core.New(store, clientIP,
		[]core.Limit{core.PerSecond(10), core.PerHour(1000)},
		core.WithName("api"))
	if err != nil {
		return nil, err
	}
	login, err := core.New(store, clientIP,
		[]core.Limit{{Rate: 5, Period: time.Minute, Penalty: 15 * time.Minute}},
		core.WithName("login"))
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
