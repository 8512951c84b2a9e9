package exampleenv

import (
	"context"
	"errors"
	"flag"
	"log"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/keyfuncs"
)

// shutdownTimeout bounds a graceful shutdown: the requests in flight get
// this long to finish.
const shutdownTimeout = 10 * time.Second

// Env is an example server's command line: where it listens, and the
// store its limiters keep their state in.
type Env struct {
	Addr  string
	Store store.Store
	// client is the Redis client behind Store; nil for the memory store.
	client *redis.Client
}

// Parse parses the command line: -addr, the listen address, and -redis, a
// Redis URL; without -redis, Store is a memory store (one process).
// It exits the program when a flag or the URL is wrong.
func Parse() *Env {
	e := new(Env)
	flag.StringVar(&e.Addr, "addr", "127.0.0.1:8080", "listen address")
	redisURL := flag.String("redis", "", "Redis URL, such as redis://localhost:6379/0 (default: in-memory store)")
	flag.Parse()
	store, client, err := openStore(*redisURL)
	if err != nil {
		log.Fatal(err)
	}
	e.Store, e.client = store, client
	return e
}

// openStore returns a memory store for url "", and otherwise a Redis store
// shared by every process given the same url, with its client (to close).
func openStore(url string) (store.Store, *redis.Client, error) {
	if url == "" {
		return memorystore.New(), nil, nil
	}
	opt, err := redisstore.ParseURL(url) // no retries, deadlines honoured
	if err != nil {
		return nil, nil, errors.New("-redis: " + err.Error())
	}
	client := redis.NewClient(opt)
	store, err := redisstore.New(client)
	if err != nil {
		_ = client.Close()
		return nil, nil, err
	}
	return store, client, nil
}

// Limiters returns the limiters of the framework examples' routes, keeping
// their state in store, each client keyed by its peer address:
//
//	api    10 per second and 1000 per hour
//	login  5 per minute; a client that goes over is locked out for 15 minutes
//
// Behind a load balancer, name it with keyfuncs.WithTrustedProxies, or
// every client shares its address. Each limiter has its own name, which
// keeps their counters apart in a shared store.
func Limiters(store store.Store) (api, login *core.Limiter, err error) {
	clientIP, err := keyfuncs.IP()
	if err != nil {
		return nil, nil, err
	}
	api, err = core.New(store, clientIP,
		[]core.Limit{core.PerSecond(10), core.PerHour(1000)},
		core.WithName("api"))
	if err != nil {
		return nil, nil, err
	}
	login, err = core.New(store, clientIP,
		[]core.Limit{{Rate: 5, Period: time.Minute, Penalty: 15 * time.Minute}},
		core.WithName("login"))
	return api, login, err
}

// Run is the main function of the framework examples: it parses the
// command line (Parse), builds the limiters of their routes on its store
// (Limiters), and serves the handler routes returns for them until SIGINT
// or SIGTERM (Env.Serve). It exits the program when the limiters cannot be
// built or the server fails.
func Run(routes func(api, login *core.Limiter) http.Handler) {
	e := Parse()
	api, login, err := Limiters(e.Store)
	if err != nil {
		log.Fatal(err)
	}
	e.Serve(routes(api, login))
}

// Serve serves h on e.Addr until the process gets SIGINT or SIGTERM, then
// shuts down gracefully and closes the Redis client. It exits the program
// when the server fails.
func (e *Env) Serve(h http.Handler) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log.Printf("listening on http://%s", e.Addr)
	err := Serve(ctx, e.Addr, h)
	if e.client != nil {
		_ = e.client.Close()
	}
	if err != nil {
		log.Fatal(err)
	}
}

// Serve serves h on addr until ctx ends, then lets the requests in flight
// finish (for up to shutdownTimeout) and returns nil; it returns the
// server's error when it cannot serve.
func Serve(ctx context.Context, addr string, h http.Handler) error {
	srv := &http.Server{Addr: addr, Handler: h, ReadHeaderTimeout: 10 * time.Second}
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	<-stopped
	return nil
}
