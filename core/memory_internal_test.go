package core

import (
	"context"
	"strings"
	"testing"
	"time"
	"unsafe"
)

// White-box checks of how MemoryStore stores keys and sizes its shards.

func TestMemoryStoreKeyStorage(t *testing.T) {
	s := NewMemoryStore()
	l := Limit{Algorithm: FixedWindow, Rate: 5, Period: time.Minute}
	// A short key that is a slice of a large string must not pin it.
	big := strings.Repeat("x", 1<<20) + "client-7"
	short := big[len(big)-len("client-7"):]
	long := strings.Repeat("y", 64<<10)
	for _, key := range []string{short, long} {
		if _, err := s.Take(context.Background(), key, 1, l); err != nil {
			t.Fatal(err)
		}
	}
	var sawShort, sawLong bool
	for i := range s.shards {
		for k := range s.shards[i].states {
			switch {
			case !k.digest && k.key == short:
				sawShort = true
				if unsafe.StringData(k.key) == unsafe.StringData(short) {
					t.Error("the stored key shares the caller's memory")
				}
			case k.digest:
				sawLong = true
				if len(k.key) != 32 {
					t.Errorf("a 64 kB key is stored in %d bytes, want its 32-byte digest", len(k.key))
				}
			}
		}
	}
	if !sawShort || !sawLong {
		t.Fatalf("states not found: short %v, long %v", sawShort, sawLong)
	}
}

func TestMemoryStoreShardSizes(t *testing.T) {
	for _, c := range []struct{ maxKeys, shards int }{
		{1, 1}, {64, 1}, {127, 1}, {128, 2}, {1000, 8}, {1 << 14, 256}, {DefaultMaxKeys, 256}, {0, 256}, {-5, 256},
	} {
		s := NewMemoryStore(WithMaxKeys(c.maxKeys))
		want := c.maxKeys
		if want <= 0 {
			want = DefaultMaxKeys
		}
		total := 0
		for i := range s.shards {
			total += s.shards[i].capacity
		}
		if len(s.shards) != c.shards || total != want {
			t.Errorf("WithMaxKeys(%d): %d shards holding %d, want %d shards holding %d", c.maxKeys, len(s.shards), total, c.shards, want)
		}
	}
}
