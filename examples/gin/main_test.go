package main

import (
	"context"
	"testing"

	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/internal/exampletest"
)

func TestRoutes(t *testing.T) {
	api, login, err := limiters(memorystore.New())
	if err != nil {
		t.Fatal(err)
	}
	exampletest.CheckRoutes(t, routes(api, login))
}

// A user copies main.go: it imports nothing internal to sluice.
func TestImportsNothingInternal(t *testing.T) { exampletest.CheckImports(t) }

func TestOpenStore(t *testing.T) {
	st, closeStore, err := openStore(context.Background(), "")
	if _, ok := st.(*memorystore.Store); !ok || err != nil {
		t.Fatalf(`openStore(""): %T, %v; want a memory store`, st, err)
	}
	closeStore()
	if _, _, err := openStore(context.Background(), "http://localhost"); err == nil {
		t.Error("openStore(http://localhost) succeeded, want an error")
	}
}
