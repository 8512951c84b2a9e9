package main

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"math"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/keyfuncs"
	"github.com/sluicehq/sluice/nethttp"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "listen address")
	redisURL := flag.String("redis", "", "Redis URL, such as redis://localhost:6379/0 (default: in-memory store)")
	token := flag.String("admin-token", "secret", "the X-Admin-Token that /admin/reset requires")
	flag.Parse()
	if err := run(*addr, *redisURL, *token); err != nil {
		log.Fatal(err)
	}
}

// run serves until SIGINT or SIGTERM, then shuts down gracefully and
// closes the store.
func run(addr, redisURL, adminToken string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	st, closeStore, err := openStore(ctx, redisURL)
	if err != nil {
		return err
	}
	defer closeStore()
	h, err := newHandler(st, adminToken)
	if err != nil {
		return err
	}
	log.Printf("listening on http://%s", addr)
	return serve(ctx, addr, h)
}

// openStore returns a memory store for url "" (one process), and otherwise
// a store on the Redis at url, which every instance given the same url
// shares (a reset through one reaches all), with the function that closes
// it.
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

// planOf names the plan of a request's API key. A real service looks the
// key up in memory (refreshed from its database), never per request in
// the database; this one reads the plan from the key's prefix.
func planOf(r *http.Request) string {
	plan, _, _ := strings.Cut(r.Header.Get("X-API-Key"), "-")
	return plan
}

// newHandler returns the routes, with their limiter keeping state in st.
func newHandler(st store.Store, adminToken string) (http.Handler, error) {
	apiKey, err := keyfuncs.Header("X-API-Key")
	if err != nil {
		return nil, err
	}
	api, err := core.New(st,
		"api", apiKey, []store.Limit{store.PerMinute(10)},

		core.WithHeaders(core.HeadersLegacy|core.HeadersIETF),
		core.WithPlans(planOf, map[string][]store.Limit{
			"free": {store.PerMinute(100)},
			"pro":  {store.PerMinute(10_000)},
		}))
	if err != nil {
		return nil, err
	}

	mux := http.NewServeMux()
	mux.Handle("GET /api/items/{id}", nethttp.Middleware(api)(http.HandlerFunc(
		func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "item %s\n", r.PathValue("id"))
		})))
	mux.HandleFunc("GET /rate_limit", func(w http.ResponseWriter, r *http.Request) {
		res, err := api.Status(r)
		if err != nil {
			http.Error(w, "no quota to show", http.StatusServiceUnavailable)
			return
		}
		retry := int64(0) // seconds until a request would pass: none to wait when one would now
		if !res.Allowed {
			retry = int64(math.Ceil(res.RetryAfter.Seconds())) // as Retry-After: whole seconds, rounded up
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"plan":        planOf(r),
			"limit":       res.Limit,
			"remaining":   res.Remaining, // what the client can still do now
			"allowed":     res.Allowed,   // would a request pass now
			"reset":       res.ResetAt(time.Now()).Unix(),
			"retry_after": retry,
		})
	})
	mux.HandleFunc("POST /admin/reset", func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("X-Admin-Token")), []byte(adminToken)) != 1 {
			http.Error(w, "forbidden", http.StatusForbidden)
			return
		}
		key := r.URL.Query().Get("key")
		if key == "" {
			http.Error(w, "key is required", http.StatusBadRequest)
			return
		}
		err := api.Reset(r.Context(), key)
		if errors.Is(err, store.ErrNotFound) {
			http.Error(w, "no state for this key", http.StatusNotFound)
			return
		}
		if err != nil {
			log.Printf("reset %q: %v", key, err)
			http.Error(w, "reset failed", http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	return mux, nil
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
