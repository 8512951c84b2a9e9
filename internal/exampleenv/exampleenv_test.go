package exampleenv

import (
	"context"
	"net/http"
	"testing"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/internal/redistest"
)

func TestOpenStore(t *testing.T) {
	store, client, err := openStore("")
	if _, ok := store.(*memorystore.Store); !ok || client != nil || err != nil {
		t.Errorf(`openStore(""): %T, %v, %v; want a MemoryStore`, store, client, err)
	}
	if _, _, err := openStore("http://localhost"); err == nil {
		t.Error("openStore(http://localhost) succeeded, want an error")
	}

	store, client, err = openStore("redis://" + redistest.Shared(t).Addr + "/0")
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	if _, ok := store.(*redisstore.Store); !ok {
		t.Fatalf("openStore(redis://...): %T, want a *redisstore.Store", store)
	}
	// go-redis turns MaxRetries -1 into 0 (no retries; its default is 3).
	if o := client.Options(); o.MaxRetries != 0 || !o.ContextTimeoutEnabled {
		t.Errorf("the client retries (MaxRetries %d) or ignores deadlines (ContextTimeoutEnabled %v)", o.MaxRetries, o.ContextTimeoutEnabled)
	}
	r, err := store.Take(context.Background(), "k", 1, specs(core.PerMinute(5))...)
	if err != nil || !r.Allowed {
		t.Errorf("Take on the Redis store: %+v, %v", r, err)
	}
}

func TestServe(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Serve(ctx, "127.0.0.1:0", http.NotFoundHandler()); err != nil {
		t.Errorf("Serve after its context ended: %v, want nil (a graceful shutdown)", err)
	}
	if err := Serve(context.Background(), "127.0.0.1:-1", http.NotFoundHandler()); err == nil {
		t.Error("Serve on a bad address returned nil, want the server's error")
	}
}
