package keyfuncs_test

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/keyfuncs"
)

// An operator resets a client by what the client sends (its API key, its
// address), whatever the composition of key functions: a Reset of the key the key function makes of an administrator's request runs
// the Limiter's key function on a request that carries it. Reset with the
// bare identifier matches nothing, and says so.
func TestResetRequestThroughCompositions(t *testing.T) {
	apiKey, err := keyfuncs.Header("X-API-Key")
	if err != nil {
		t.Fatal(err)
	}
	ip, err := keyfuncs.IP()
	if err != nil {
		t.Fatal(err)
	}
	identity := func(key, addr, pattern string) *http.Request {
		r, err := http.NewRequestWithContext(context.Background(), http.MethodGet, "http://example.com/x", nil)
		if err != nil {
			t.Fatal(err)
		}
		if key != "" {
			r.Header.Set("X-API-Key", key)
		}
		r.RemoteAddr, r.Pattern = addr, pattern
		return r
	}
	for _, c := range []struct {
		name   string
		key    core.KeyFunc
		client *http.Request // as the client sent it
		admin  *http.Request // as the operator knows it
		bare   string        // the identifier alone
	}{
		{"Fallback by API key", keyfuncs.Fallback(apiKey, ip),
			identity("free-key-1", "192.0.2.1:1234", ""), identity("free-key-1", "", ""), "free-key-1"},
		{"Fallback by IP", keyfuncs.Fallback(apiKey, ip),
			identity("", "192.0.2.1:1234", ""), identity("", "192.0.2.1:0", ""), "192.0.2.1"},
		{"Join IP and route", keyfuncs.Join(ip, keyfuncs.Route()),
			identity("", "192.0.2.1:1234", "GET /x"), identity("", "192.0.2.1:0", "GET /x"), "192.0.2.1"},
		{"Join API key and IP", keyfuncs.Join(apiKey, ip),
			identity("k", "192.0.2.1:1234", ""), identity("k", "192.0.2.1:0", ""), "k"},
	} {
		t.Run(c.name, func(t *testing.T) {
			l, err := core.New(memorystore.New(), "test", c.key, []store.Limit{store.PerHour(1)})
			if err != nil {
				t.Fatal(err)
			}
			l.Decide(c.client)
			if d := l.Decide(c.client); d.Action != core.Refuse {
				t.Fatalf("second request: %v, want refused", d.Outcome)
			}
			if err := l.Reset(context.Background(), c.bare); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("Reset(%q): %v, want ErrNotFound", c.bare, err)
			}
			key, err := c.key(c.admin) // what the key function makes of what the client sends
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Reset(context.Background(), key); err != nil {
				t.Fatalf("Reset(%q): %v", key, err)
			}
			if d := l.Decide(c.client); d.Action != core.Serve {
				t.Errorf("after the Reset: %v, want served", d.Outcome)
			}
		})
	}
}
