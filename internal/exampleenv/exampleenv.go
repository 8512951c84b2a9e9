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

	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/core/store"
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

// Serve serves h on e.Addr until the process gets SIGINT or SIGTERM, then
// shuts down gracefully and closes the Redis store and client. It exits
// the program when the server fails.
func (e *Env) Serve(h http.Handler) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log.Printf("listening on http://%s", e.Addr)
	err := Serve(ctx, e.Addr, h)
	if e.client != nil {
		_ = e.Store.(*redisstore.Store).Close() // its subscription, before its client
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
