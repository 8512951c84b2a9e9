package core_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/internal/partial"
	"github.com/sluicehq/sluice/internal/storekey"
)

// A flood through one Limiter cannot lift another Limiter's lock-out on
// the memory store they share (issue 29, item 1; pitfall 26). Two
// Limiters on one small store, as the quick start sets them up: login (5
// per 10 minutes, a penalty of an hour) keyed by the peer address, and a
// cheap one keyed by a header the client picks. A client exhausts its login
// attempts (or is locked out), then floods the cheap Limiter with a fresh
// header value per request, exhausting (or locking) each: every flood
// state then ranks with the login state, and on the old eviction 12,500
// requests (25,000 with a penalty on both) gave the client 5 fresh login
// attempts. Each Limiter now has its share of every shard, and a flood
// evicts within its own Limiter.
func TestMemoryFloodKeepsOtherLimitersLockOut(t *testing.T) {
	for _, c := range []struct {
		name   string
		login  store.Limit
		cheap  store.Limit
		lock   bool // the client is denied once more, so locked for the penalty
		perKey int  // flood requests per header value
	}{
		{
			name:   "exhausted",
			login:  store.Limit{Algorithm: store.GCRA, Rate: 5, Period: 10 * time.Minute, Penalty: time.Hour},
			cheap:  store.Limit{Algorithm: store.GCRA, Rate: 1, Period: time.Hour},
			perKey: 1,
		},
		{
			name:   "locked",
			login:  store.Limit{Algorithm: store.GCRA, Rate: 5, Period: 10 * time.Minute, Penalty: time.Hour},
			cheap:  store.Limit{Algorithm: store.GCRA, Rate: 1, Period: time.Minute, Penalty: time.Hour},
			lock:   true,
			perKey: 2,
		},
		{
			name:   "sliding log locked",
			login:  store.Limit{Algorithm: store.SlidingLog, Rate: 5, Period: 10 * time.Minute, Penalty: time.Hour},
			cheap:  store.Limit{Algorithm: store.FixedWindow, Rate: 1, Period: time.Minute, Penalty: time.Hour},
			lock:   true,
			perKey: 2,
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			now := time.Unix(1_700_000_000, 0)
			clock := func() time.Time { return now }
			st := memorystore.New(memorystore.WithMaxKeys(10_000), memorystore.WithClock(clock))
			byPeer := func(r *http.Request) (string, error) { return r.RemoteAddr, nil }
			byHeader := func(r *http.Request) (string, error) { return r.Header.Get("X-Client"), nil }
			login, err := core.New(st, "login", byPeer, []store.Limit{c.login}, core.WithClock(clock))
			if err != nil {
				t.Fatal(err)
			}
			cheap, err := core.New(st, "cheap", byHeader, []store.Limit{c.cheap}, core.WithClock(clock))
			if err != nil {
				t.Fatal(err)
			}
			attempt := func() core.Action {
				r := httptest.NewRequest(http.MethodPost, "/login", nil)
				r.RemoteAddr = "203.0.113.9:4711"
				return login.Decide(r).Action
			}
			for i := range 5 {
				if a := attempt(); a != core.Serve {
					t.Fatalf("login attempt %d: %v, want serve", i+1, a)
				}
			}
			if c.lock {
				if a := attempt(); a != core.Refuse {
					t.Fatalf("sixth login attempt: %v, want refuse (and a lock)", a)
				}
			}
			const keys = 50_000
			for i := range keys {
				if i%100 == 0 {
					now = now.Add(time.Millisecond) // the flood's states outlive the login state
				}
				r := httptest.NewRequest(http.MethodGet, "/cheap", nil)
				r.RemoteAddr = "203.0.113.9:4711"
				r.Header.Set("X-Client", "flood-"+strconv.Itoa(i))
				for range c.perKey {
					cheap.Decide(r)
				}
			}
			if a := attempt(); a != core.Refuse {
				t.Fatalf("after %d requests through the cheap Limiter the locked-out client gets a login attempt: %v", keys*c.perKey, a)
			}
		})
	}
}

// keyRecorder is a store that records the keys it is given.
type keyRecorder struct {
	partial.Store
	mu   sync.Mutex
	keys []string
}

func (k *keyRecorder) Take(_ context.Context, key string, _ int64, _ ...store.Spec) (store.Result, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.keys = append(k.keys, key)
	return store.Result{Allowed: true, Limit: 1, Remaining: 1}, nil
}

// Every store key a Limiter passes, with a key or without one, names its
// Limiter as the memory store reads it (internal/storekey), for every name
// core.New accepts, up to the longest: the memory store's share per
// Limiter rests on it.
func TestStoreKeysNameTheirLimiter(t *testing.T) {
	for _, name := range []string{"a", "login", "3:x:", "a!b", strings.Repeat("n", storekey.MaxName)} {
		rec := &keyRecorder{}
		keys := []string{"203.0.113.9", "", "9:other:x"}
		i := 0
		keyFn := func(*http.Request) (string, error) {
			k := keys[i%len(keys)]
			i++
			if k == "" {
				return "", core.ErrNoKey
			}
			return k, nil
		}
		l, err := core.New(rec, name, keyFn, []store.Limit{store.PerMinute(5)}, core.WithKeyErrorRule(core.KeyErrorPerAddress, nil))
		if err != nil {
			t.Fatalf("name %q: %v", name, err)
		}
		for range keys {
			l.Decide(httptest.NewRequest(http.MethodGet, "/", nil))
		}
		if len(rec.keys) != len(keys) {
			t.Fatalf("name %q: %d store keys, want %d", name, len(rec.keys), len(keys))
		}
		for _, k := range rec.keys {
			if got, _, ok := storekey.Name(k); !ok || got != name {
				t.Errorf("store key %.40q reads as Limiter %.20q (%v), want %.20q", k, got, ok, name)
			}
		}
	}
	// A longer name is refused: storekey.Name would not read it back.
	_, err := core.New(&keyRecorder{}, strings.Repeat("n", storekey.MaxName+1), func(*http.Request) (string, error) { return "k", nil }, []store.Limit{store.PerMinute(5)})
	if !errors.Is(err, core.ErrInvalidOption) {
		t.Errorf("a name of %d characters: %v, want ErrInvalidOption", storekey.MaxName+1, err)
	}
}
