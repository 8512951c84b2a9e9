package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/ginlimit"
	"github.com/sluicehq/sluice/keyfuncs"
)

func main() {
	gin.SetMode(gin.ReleaseMode)
	addr := flag.String("addr", "127.0.0.1:8080", "listen address")
	redisURL := flag.String("redis", "", "Redis URL, such as redis://localhost:6379/0 (default: in-memory store)")
	flag.Parse()
	if err := run(*addr, *redisURL); err != nil {
		log.Fatal(err)
	}
}

// run serves until SIGINT or SIGTERM, then shuts down gracefully and
// closes the store.
func run(addr, redisURL string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	st, closeStore, err := openStore(ctx, redisURL)
	if err != nil {
		return err
	}
	defer closeStore()
	api, login, err := limiters(st)
	if err != nil {
		return err
	}
	log.Printf("listening on http://%s", addr)
	return serve(ctx, addr, routes(api, login))
}

// openStore returns a memory store for url "" (one process), and otherwise
// a store on the Redis at url, which every process given the same url
// shares, with the function that closes it.
func openStore(ctx context.Context, url string) (store.Store, func(), error) {
	if url == "" {
		return memorystore.New(), func() {}, nil
	}
	opt, err := redisstore.ParseURL(url) // no retries, deadlines honoured
	if err != nil {
		return nil, nil, fmt.Errorf("-redis: %w", err)
	}
	client := redis.NewClient(opt)
	rs, err := redisstore.New(client)
	if err == nil {
		err = rs.Ping(ctx) // a wrong password or database shows now
	}
	if err != nil {
		_ = client.Close()
		return nil, nil, err
	}
	// The Store first (it stops its subscription), then the client.
	return rs, func() { _ = rs.Close(); _ = client.Close() }, nil
}

// limiters returns the limiters of the routes, keeping their state in st,
// each client keyed by its peer address:
//
//	api    10 per second and 1000 per hour
//	login  5 per minute; a client that goes over is locked out for 15 minutes
//
// Behind a load balancer, name it with keyfuncs.WithTrustedProxies, or
// every client shares its address. Each limiter has its own name, which
// keeps their counters apart in a shared store.
func limiters(st store.Store) (api, login *core.Limiter, err error) {
	clientIP, err := keyfuncs.IP()
	if err != nil {
		return nil, nil, err
	}
	api, err = core.New(st,

		"api", clientIP,
		[]store.Limit{store.PerSecond(10), store.PerHour(1000)},
	)
	if err != nil {
		return nil, nil, err
	}
	login, err = core.New(st,

		"login", clientIP,
		[]store.Limit{{Rate: 5, Period: time.Minute, Penalty: 15 * time.Minute}},
	)
	return api, login, err
}

// routes returns the server's routes, limited by api and login.
//
// The limiters key clients themselves (keyfuncs.IP reads the peer
// address): gin's own client-IP settings play no part, and ginlimit logs
// once if they resolve clients through a proxy. The router trusts none
// either, so that handlers' c.ClientIP() agrees with the limiters.
func routes(api, login *core.Limiter) http.Handler {
	router := gin.New()
	if err := router.SetTrustedProxies(nil); err != nil {
		panic(err) // unreachable: nil is a valid list
	}
	router.Use(gin.Recovery())
	group := router.Group("/api", ginlimit.New(api)) // every route of the group
	group.GET("/items/:id", func(c *gin.Context) {
		c.String(http.StatusOK, "item %s\n", c.Param("id"))
	})
	router.POST("/login", ginlimit.New(login), func(c *gin.Context) {
		c.String(http.StatusOK, "welcome\n")
	})
	router.GET("/health", func(c *gin.Context) {
		c.String(http.StatusOK, "ok\n")
	})
	return router
}

// serve serves h on addr until ctx ends, then gives the requests in
// flight up to 10 seconds to finish.
func serve(ctx context.Context, addr string, h http.Handler) error {
	srv := &http.Server{Addr: addr, Handler: h, ReadHeaderTimeout: 10 * time.Second}
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	<-stopped // Shutdown has returned: the requests in flight are done
	return nil
}
