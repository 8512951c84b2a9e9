package core

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/store"
)

// A client that drops its connection cancels the request's context, often
// while the store call is in flight. Such a request must never be served
// unlimited: under every failure policy, and on the memory store (which
// fails for a done context and is its own fallback), it is refused and
// nothing is charged.
func TestCanceledRequestIsNeverServed(t *testing.T) {
	gone := func() *http.Request {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		return request("mallory").WithContext(ctx)
	}
	limits := []store.Limit{store.PerHour(1)}
	storeWatchingCtx := func() store.Store {
		return &scriptStore{take: func(ctx context.Context, _ string, _ int64) (store.Result, error) {
			if err := ctx.Err(); err != nil {
				return store.Result{}, err
			}
			return store.Result{Allowed: true, Limit: 1, Remaining: 0, ResetAfter: time.Hour}, nil
		}}
	}
	cases := []struct {
		name  string
		store func() store.Store
		opts  []Option
	}{
		{"memory store", func() store.Store { return memorystore.New() }, nil},
		{"remote, FailLocal", storeWatchingCtx, nil},
		{"remote, FailOpen", storeWatchingCtx, []Option{WithFailurePolicy(FailOpen)}},
		{"remote, FailClosed", storeWatchingCtx, []Option{WithFailurePolicy(FailClosed)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var rec recorder
			st := tc.store()
			l := mustNew(t, st, limits, append(tc.opts, WithObserver(rec.observe))...)
			for i := 0; i < 5; i++ {
				d := l.Decide(gone())
				if d.Action != Refuse || d.Outcome != OutcomeCanceled {
					t.Fatalf("request %d from a gone client: %v/%v, want refuse/canceled", i, d.Action, d.Outcome)
				}
				if got := d.Response().Status; got != http.StatusServiceUnavailable {
					t.Fatalf("response status %d, want 503", got)
				}
				if ev := rec.last(t); ev.Outcome != OutcomeCanceled || ev.Err == nil {
					t.Fatalf("event %v err %v, want canceled with the store's error", ev.Outcome, ev.Err)
				}
			}
			// Nothing was charged: the client's one request an hour is
			// still there, and then it is denied.
			if d := l.Decide(request("mallory")); d.Action != Serve || d.Outcome != OutcomeAllowed {
				t.Fatalf("first live request: %v/%v, want serve/allowed", d.Action, d.Outcome)
			}
			if ms, ok := st.(*memorystore.Store); ok {
				if d := l.Decide(request("mallory")); d.Outcome != OutcomeDenied {
					t.Fatalf("second live request on %T: %v, want denied", ms, d.Outcome)
				}
			}
		})
	}
	t.Run("shadow mode serves", func(t *testing.T) {
		l := mustNew(t, memorystore.New(), limits, WithShadow())
		if d := l.Decide(gone()); d.Action != Serve || d.Outcome != OutcomeCanceled {
			t.Fatalf("shadow: %v/%v, want serve/canceled", d.Action, d.Outcome)
		}
	})
	if OutcomeCanceled.String() != "canceled" {
		t.Fatalf("OutcomeCanceled.String() = %q", OutcomeCanceled)
	}
}
