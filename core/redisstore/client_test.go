package redisstore_test

import (
	"context"
	"errors"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/internal/redistest"
)

var clientTestLimit = store.PerSecond(10)

// deadAddr returns an address where nothing listens: a connection to it is
// refused at once.
func deadAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

func clientStore(t *testing.T, client redis.UniversalClient, opts ...redisstore.Option) *redisstore.Store {
	t.Helper()
	t.Cleanup(func() { _ = client.Close() })
	s, err := redisstore.New(client, append(redisstore.Bare(), opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// With Redis down, a Take fails at once with the refused connection, rather
// than after go-redis' dial retries (5 attempts, 100 ms apart) or the
// context's deadline. (The breaker is off: a refusal opens it at once.)
func TestClientOptionsFailFast(t *testing.T) {
	addr := deadAddr(t)
	opt, err := redisstore.ParseURL("redis://" + addr + "/0")
	if err != nil {
		t.Fatal(err)
	}
	for name, client := range map[string]redis.UniversalClient{
		"UniversalOptions": redis.NewUniversalClient(redisstore.UniversalOptions(addr)),
		"ParseURL":         redis.NewClient(opt),
	} {
		s := clientStore(t, client, redisstore.WithBreaker(0, 0))
		const takes = 4
		start := time.Now()
		for i := 0; i < takes; i++ {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, err := s.Take(ctx, "k", 1, specs(clientTestLimit)...)
			cancel()
			if !errors.Is(err, syscall.ECONNREFUSED) {
				t.Fatalf("%s: Take with Redis down: %v, want connection refused", name, err)
			}
		}
		if per := time.Since(start) / takes; per > 50*time.Millisecond {
			t.Errorf("%s: a Take with Redis down took %v on average, want it to fail at once (< 50ms)", name, per)
		}
	}
}

// On a Redis that does not answer, the context's deadline bounds a Take,
// far below go-redis' ReadTimeout (3 s).
func TestClientOptionsDeadline(t *testing.T) {
	srv := redistest.StartServer(t)
	s := clientStore(t, redis.NewUniversalClient(redisstore.UniversalOptions(srv.Addr)))
	if _, err := s.Take(context.Background(), "k", 1, specs(clientTestLimit)...); err != nil {
		t.Fatal(err) // connected, script loaded
	}
	srv.Freeze(t)
	defer srv.Thaw(t)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := s.Take(ctx, "k", 1, specs(clientTestLimit)...)
	if took := time.Since(start); err == nil || took > 2*time.Second {
		t.Errorf("Take with a 50ms deadline on a frozen Redis: %v after %v, want an error within the deadline", err, took)
	}
}

func TestParseURL(t *testing.T) {
	opt, err := redisstore.ParseURL("redis://u:p@example.com:6380/2")
	if err != nil {
		t.Fatal(err)
	}
	if opt.Addr != "example.com:6380" || opt.DB != 2 || opt.Username != "u" || opt.Password != "p" {
		t.Errorf("ParseURL: Addr %q DB %d user %q:%q, want example.com:6380 2 u:p", opt.Addr, opt.DB, opt.Username, opt.Password)
	}
	want := redisstore.UniversalOptions().Simple()
	if opt.MaxRetries != want.MaxRetries || opt.ContextTimeoutEnabled != want.ContextTimeoutEnabled ||
		opt.DialTimeout != want.DialTimeout || opt.DialerRetries != want.DialerRetries ||
		opt.DialerRetryTimeout != want.DialerRetryTimeout {
		t.Errorf("ParseURL's settings differ from UniversalOptions': %+v", opt)
	}

	opt, err = redisstore.ParseURL("redis://localhost:6379?max_retries=2&dial_timeout=3s")
	if err != nil {
		t.Fatal(err)
	}
	if opt.MaxRetries != 2 || opt.DialTimeout != 3*time.Second {
		t.Errorf("ParseURL: MaxRetries %d, DialTimeout %v; want the URL's 2 and 3s", opt.MaxRetries, opt.DialTimeout)
	}

	if _, err := redisstore.ParseURL("http://localhost"); err == nil {
		t.Error("ParseURL(http://localhost) succeeded, want an error")
	}
}
