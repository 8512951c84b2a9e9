package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/promlimit"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(exitCode(err, os.Stderr))
}

// exitCode reports err on w and returns the process exit status: 0 for
// nil, 2 for a bad flag, 1 otherwise.
func exitCode(err error, w io.Writer) int {
	if err == nil {
		return 0
	}
	var ue *usageError
	if errors.As(err, &ue) {
		fmt.Fprintf(w, "demo: %v\nRun 'demo -h' for the flags.\n", err)
		return 2
	}
	fmt.Fprintf(w, "demo: %v\n", err)
	return 1
}

// shutdownTimeout bounds the graceful shutdown: requests in flight (held
// ones included) get this long to finish.
const shutdownTimeout = 10 * time.Second

// run is the demo: it parses args, serves until ctx ends, then shuts down
// gracefully and returns nil. stdout gets only the "listening on" line;
// stderr gets the log. A bad command line returns a *usageError before
// anything listens; -h prints the usage on stdout and returns nil.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseConfig(args)
	if errors.Is(err, errHelp) {
		_, err = fmt.Fprint(stdout, usageText)
		return err
	}
	if err != nil {
		return err
	}
	st, closeStore, err := openStore(ctx, cfg, stderr)
	if err != nil {
		return err
	}
	defer closeStore()
	handler, err := limitedHandler(cfg, st)
	if err != nil {
		return err
	}
	return serve(ctx, cfg, handler, stdout, stderr)
}

// openStore returns the store cfg names, checked (checkRedis) if it is
// Redis, and the function that closes it and its client.
func openStore(ctx context.Context, cfg *config, stderr io.Writer) (store.Store, func(), error) {
	client := cfg.redisClient()
	if client == nil {
		return memorystore.New(), func() {}, nil
	}
	rs, err := redisstore.New(client, redisstore.WithTimeout(cfg.timeout))
	if err != nil {
		_ = client.Close()
		return nil, nil, fmt.Errorf("redis store: %w", err)
	}
	closeStore := func() {
		_ = rs.Close()
		_ = client.Close()
	}
	if err := checkRedis(ctx, rs, cfg, stderr); err != nil {
		closeStore()
		return nil, nil, err
	}
	return rs, closeStore, nil
}

// limitedHandler returns the demo's routes: GET / limited by cfg's limiter
// on store, which reports to the metrics that /metrics serves, with the
// health of a Redis store (promlimit.WithStoreStats).
func limitedHandler(cfg *config, st store.Store) (http.Handler, error) {
	reg := prometheus.NewRegistry()
	var opts []promlimit.Option
	if rs, ok := st.(interface{ Stats() store.Stats }); ok { // Redis: the fleet, breakers and debts too
		opts = append(opts, promlimit.WithStoreStats(rs.Stats))
	}
	metrics, err := promlimit.New(reg, opts...)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	limiter, err := cfg.newLimiter(st, core.WithObserver(metrics.Observe))
	if err != nil {
		return nil, err
	}
	return newHandler(cfg.framework, limiter, promhttp.HandlerFor(reg, promhttp.HandlerOpts{})), nil
}

// serve serves handler on cfg.addr until ctx ends, then shuts down
// gracefully (for up to shutdownTimeout). It writes "listening on
// http://ADDR" on stdout once it accepts connections.
func serve(ctx context.Context, cfg *config, handler http.Handler, stdout, stderr io.Writer) error {
	ln, err := net.Listen("tcp", cfg.addr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	srv := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          log.New(stderr, "demo: http: ", 0),
	}
	fmt.Fprintf(stderr, "demo: %s, GET / limited to %v per %s key, store %s, failure %s, headers %s\n",
		cfg.framework, cfg.limit, cfg.keyDesc(), cfg.storeName(), cfg.failureName, cfg.headersName)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()

	if _, err := fmt.Fprintf(stdout, "listening on http://%s\n", ln.Addr()); err != nil {
		_ = srv.Close()
		return fmt.Errorf("writing to stdout: %w", err)
	}

	select {
	case err := <-served:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	shutCtx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(shutCtx); err != nil {
		_ = srv.Close()
		return fmt.Errorf("shutdown: %w", err)
	}
	fmt.Fprintln(stderr, "demo: shut down")
	return nil
}
