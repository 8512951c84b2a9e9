package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/keyfuncs"
	"github.com/sluicehq/sluice/nethttp"
)

// newServer returns the server's handler, limited per client IP by limits
// read from path, and the reloader that keeps them in step with the file.
func newServer(path string, logger *slog.Logger) (http.Handler, *reloader, error) {
	clientIP, err := keyfuncs.IP()
	if err != nil {
		return nil, nil, err
	}
	r, err := newReloader(path, logger, func(limits []store.Limit) (*core.Limiter, error) {
		return core.New(memorystore.New(),
			"api", clientIP, limits,
			core.WithPolicyNames(map[string]string{"": "api"}), core.WithHeaders(core.HeadersLegacy|core.HeadersIETF))
	})
	if err != nil {
		return nil, nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("GET /", nethttp.Middleware(r.limiter)(http.HandlerFunc(
		func(w http.ResponseWriter, _ *http.Request) {
			fmt.Fprintln(w, "ok")
		})))
	return mux, r, nil
}

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "listen address")
	path := flag.String("limits", "examples/reload/limits.txt", "limits file: one limit per line, like \"10/s burst 20\"")
	poll := flag.Duration("poll", 2*time.Second, "how often to check the limits file for changes")
	flag.Parse()
	if *poll <= 0 {
		log.Fatalf("-poll %v must be positive", *poll)
	}

	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	handler, r, err := newServer(*path, logger)
	if err != nil {
		log.Fatal(err)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go r.run(ctx, *poll, hup)

	logger.Info("listening", "url", "http://"+*addr, "pid", os.Getpid())
	if err := serve(ctx, *addr, handler); err != nil {
		log.Fatal(err)
	}
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
