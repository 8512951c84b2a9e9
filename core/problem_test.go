package core

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/internal/arith"
)

// decodeProblem checks that resp is an RFC 9457 problem details object of
// exactly the members the draft's types have, and returns them.
func decodeProblem(t *testing.T, resp Response) map[string]any {
	t.Helper()
	if resp.ContentType != "application/problem+json" {
		t.Fatalf("Content-Type %q", resp.ContentType)
	}
	dec := json.NewDecoder(bytes.NewReader(resp.Body))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("body %q: %v", resp.Body, err)
	}
	if dec.More() {
		t.Fatalf("body %q: more than one value", resp.Body)
	}
	if s, ok := m["status"].(json.Number); !ok || s.String() != itoa(resp.Status) {
		t.Errorf("status member %v, response status %d", m["status"], resp.Status)
	}
	for _, k := range []string{"type", "title"} {
		if s, ok := m[k].(string); !ok || s == "" {
			t.Errorf("member %q: %v", k, m[k])
		}
	}
	return m
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

func violated(m map[string]any) []string {
	out := []string{}
	for _, v := range m["violated-policies"].([]any) {
		out = append(out, v.(string))
	}
	return out
}

func TestProblemJSON(t *testing.T) {
	t.Run("429 names the refusing policies", func(t *testing.T) {
		clock := newFakeClock(t0)
		l := memoryLimiter(t, clock, []store.Limit{store.PerSecond(2), store.PerHour(3)}, WithRefusal(ProblemJSON),
			WithHeaders(HeadersIETF), WithPolicyNames(map[string]string{"": `burst"y`}))
		for i := 0; i < 2; i++ {
			if d := l.Decide(request("a")); d.Action != Serve {
				t.Fatalf("request %d: %v", i, d.Action)
			}
		}
		d := l.Decide(request("a"))
		m := decodeProblem(t, d.Response())
		if d.Response().Status != 429 || m["type"] != problemQuotaExceeded || !reflect.DeepEqual(violated(m), []string{`burst"y-0`}) {
			t.Errorf("refused by the first limit: %s", d.Response().Body)
		}
		clock.Advance(time.Second) // the first is whole again, the hourly one has 1 left
		l.Decide(request("a"))
		d = l.Decide(request("a"))
		if m := decodeProblem(t, d.Response()); !reflect.DeepEqual(violated(m), []string{`burst"y-1`}) {
			t.Errorf("refused by the second limit: %s", d.Response().Body)
		}
		// Both refuse.
		per := []store.Result{
			{Limit: 2, RetryAfter: time.Second, ResetAfter: time.Second},
			{Limit: 3, RetryAfter: time.Hour, ResetAfter: time.Hour},
		}
		d, _ = headersFor(t, []store.Limit{store.PerSecond(2), store.PerHour(3)}, arith.Combine(per), t0, WithRefusal(ProblemJSON))
		if m := decodeProblem(t, d.Response()); !reflect.DeepEqual(violated(m), []string{"default-0", "default-1"}) {
			t.Errorf("refused by both: %s", d.Response().Body)
		}
	})
	t.Run("503 when the store fails, no policy", func(t *testing.T) {
		st := &scriptStore{take: func(context.Context, string, int64) (store.Result, error) {
			return store.Result{}, errors.New("down")
		}}
		l := mustNew(t, st, perSecond10, WithFailurePolicy(FailClosed), WithRefusal(ProblemJSON))
		d := l.Decide(request("a"))
		m := decodeProblem(t, d.Response())
		if d.Response().Status != 503 || m["type"] != problemReducedCapacity || len(violated(m)) != 0 {
			t.Errorf("failed closed: %d %s", d.Response().Status, d.Response().Body)
		}
	})
	t.Run("503 for a hold cut short names the holding policy", func(t *testing.T) {
		clock := newFakeClock(t0)
		l := memoryLimiter(t, clock, []store.Limit{{Algorithm: store.LeakyBucket, Rate: 1, Period: time.Second, Burst: 3}}, WithRefusal(ProblemJSON))
		l.Decide(request("a"))
		d := l.Decide(request("a"))
		if d.Action != Hold {
			t.Fatalf("action %v", d.Action)
		}
		m := decodeProblem(t, d.Response())
		if d.Response().Status != 503 || m["type"] != problemReducedCapacity || !reflect.DeepEqual(violated(m), []string{"default"}) {
			t.Errorf("hold: %d %s", d.Response().Status, d.Response().Body)
		}
	})
	t.Run("403 under KeyErrorDeny", func(t *testing.T) {
		l := mustNew(t, &scriptStore{}, perSecond10, WithKeyErrorRule(KeyErrorDeny, nil), WithRefusal(ProblemJSON))
		d := l.Decide(httptest.NewRequest(http.MethodGet, "/", nil)) // no X-Client
		m := decodeProblem(t, d.Response())
		if d.Response().Status != 403 || m["type"] != "about:blank" {
			t.Errorf("key denied: %d %s", d.Response().Status, d.Response().Body)
		}
	})
	t.Run("the headers are unchanged", func(t *testing.T) {
		clock := newFakeClock(t0)
		l := memoryLimiter(t, clock, []store.Limit{store.PerSecond(1)}, WithRefusal(ProblemJSON), WithHeaders(HeadersLegacy|HeadersIETF))
		l.Decide(request("a"))
		d, h := decideHeaders(l, request("a"))
		w := httptest.NewRecorder()
		for k, v := range h {
			w.Header()[k] = v
		}
		d.WriteResponse(w)
		if w.Code != 429 || w.Header().Get("Content-Type") != "application/problem+json" || w.Header().Get("Retry-After") != "1" ||
			w.Header().Get("RateLimit") != `"default";r=0;t=1` {
			t.Errorf("response %d %v", w.Code, w.Header())
		}
	})
}
