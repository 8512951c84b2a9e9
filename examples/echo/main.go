package main

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

	"github.com/labstack/echo/v4"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/echolimit"
	"github.com/sluicehq/sluice/keyfuncs"
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

	e := echo.New()
	group := e.Group("/api", echolimit.New(api)) // every route of the group
	group.GET("/items/:id", func(c echo.Context) error {
		return c.String(http.StatusOK, "item "+c.Param("id")+"\n")
	})
	e.POST("/login", func(c echo.Context) error {
		return c.String(http.StatusOK, "welcome\n")
	}, echolimit.New(login))
	e.GET("/health", func(c echo.Context) error {
		return c.String(http.StatusOK, "ok\n")
	})
	return e, nil
}

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "listen address")
	redisURL := flag.String("redis", "", "Redis URL, such as redis://localhost:6379/0 (default: in-memory store)")
	flag.Parse()

	var store core.Store = core.NewMemoryStore()
	if *redisURL != "" {
		opt, err := redis.ParseURL(*redisURL)
		if err != nil {
			log.Fatalf("-redis: %v", err)
		}
		// No retries (a re-sent script may charge twice) and the Limiter's
		// per-decision deadline bounds every call; see redisstore.New.
		opt.MaxRetries = -1
		opt.ContextTimeoutEnabled = true
		client := redis.NewClient(opt)
		defer client.Close()
		if store, err = redisstore.New(client); err != nil {
			log.Fatal(err)
		}
	}
	handler, err := newHandler(store)
	if err != nil {
		log.Fatal(err)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	srv := &http.Server{Addr: *addr, Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	stopped := make(chan struct{})
	go func() { // on SIGINT or SIGTERM, let the requests in flight finish
		defer close(stopped)
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	log.Printf("listening on http://%s", *addr)
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		log.Fatal(err)
	}
	<-stopped
}
