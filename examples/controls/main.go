package main

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"net/http"
	"strings"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/internal/exampleenv"
	"github.com/sluicehq/sluice/keyfuncs"
	"github.com/sluicehq/sluice/nethttp"
)

// planOf names the plan of a request's API key. A real service looks the
// key up in memory (refreshed from its database), never per request in
// the database; this one reads the plan from the key's prefix.
func planOf(r *http.Request) string {
	plan, _, _ := strings.Cut(r.Header.Get("X-API-Key"), "-")
	return plan
}

// newHandler returns the routes, with their limiter keeping state in store.
func newHandler(store store.Store, adminToken string) (http.Handler, error) {
	apiKey, err := keyfuncs.Header("X-API-Key")
	if err != nil {
		return nil, err
	}
	api, err := core.New(store, apiKey, []core.Limit{core.PerMinute(10)},
		core.WithName("api"),
		core.WithHeaders(core.HeadersBoth),
		core.WithPlans(planOf, map[string][]core.Limit{
			"free": {core.PerMinute(100)},
			"pro":  {core.PerMinute(10_000)},
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
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"plan":        planOf(r),
			"limit":       res.Limit,
			"remaining":   res.Remaining, // what the client can still do now
			"allowed":     res.Allowed,   // would a request pass now
			"reset":       res.ResetAt(time.Now()).Unix(),
			"retry_after": core.RetryAfterSeconds(res.RetryAfter),
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
		if errors.Is(err, core.ErrNothingReset) {
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

func main() {
	token := flag.String("admin-token", "secret", "the X-Admin-Token that /admin/reset requires")
	// -addr, and -redis: without it the store is memorystore.New(),
	// with it a Redis store every instance given the same URL shares.
	env := exampleenv.Parse()
	h, err := newHandler(env.Store, *token)
	if err != nil {
		log.Fatal(err)
	}
	env.Serve(h) // until SIGINT or SIGTERM, then a graceful shutdown
}
