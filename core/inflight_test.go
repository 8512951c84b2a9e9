package core

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/store"
)

// A slot is held by the Decision that took it and given back by Done,
// once: a second Done frees nothing more; a request refused holds none.
func TestInFlightDone(t *testing.T) {
	key := func(*http.Request) (string, error) { return "k", nil }
	l, err := New(memorystore.New(), "test", key, []store.Limit{store.MaxInFlight(2, time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	req := func() Decision { return l.Decide(httptest.NewRequest(http.MethodGet, "/", nil)) }
	a, b, c := req(), req(), req()
	if !a.NeedsDone() || !b.NeedsDone() || c.NeedsDone() || c.Action != Refuse {
		t.Fatalf("3 requests on 2 slots: NeedsDone %v %v %v, third %v", a.NeedsDone(), b.NeedsDone(), c.NeedsDone(), c.Action)
	}
	if c.Result.Limit != 2 || c.Result.Remaining != 0 || c.Result.RetryAfter != time.Second {
		t.Errorf("refusal: %+v, want Limit 2, Remaining 0, RetryAfter 1s", c.Result)
	}
	c.Done(http.StatusTooManyRequests) // holds nothing: no effect
	a.Done(http.StatusOK)
	a.Done(http.StatusOK)
	if d := req(); d.Action != Serve || d.Result.Remaining != 0 {
		t.Errorf("after one Done: %v remaining %d, want served, 0 left", d.Action, d.Result.Remaining)
	}
	if d := req(); d.Action != Refuse {
		t.Errorf("a second Done freed a second slot: %v", d.Action)
	}
}

// With WithCountIf, Done releases the slot whatever the status, and gives
// back the rate's charge only for a status count does not count.
func TestInFlightWithCountIf(t *testing.T) {
	key := func(*http.Request) (string, error) { return "k", nil }
	rate := store.Limit{Algorithm: store.TokenBucket, Rate: 2, Period: time.Hour}
	l, err := New(memorystore.New(), "test", key, []store.Limit{store.MaxInFlight(1, time.Hour), rate},
		WithCountIf(func(status int) bool { return status < 400 }))
	if err != nil {
		t.Fatal(err)
	}
	req := func() Decision { return l.Decide(httptest.NewRequest(http.MethodGet, "/", nil)) }
	a := req()
	if a.Action != Serve || req().Action != Refuse {
		t.Fatal("MaxInFlight(1): want the first served, the second refused")
	}
	a.Done(http.StatusInternalServerError) // released, and not counted
	b := req()
	if b.Action != Serve || b.Result.PerLimit[1].Remaining != 1 {
		t.Fatalf("after a 500: %v, rate remaining %d; want served, 1 left (the 500 given back)", b.Action, b.Result.PerLimit[1].Remaining)
	}
	b.Done(http.StatusOK) // released, and counted
	if c := req(); c.Action != Serve || c.Result.PerLimit[1].Remaining != 0 {
		t.Fatalf("after a 200: %v, rate remaining %d; want served, 0 left", c.Action, c.Result.PerLimit[1].Remaining)
	}
}
