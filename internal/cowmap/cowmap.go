// Package cowmap is a small map for hot reads and rare writes: readers
// take no lock and box nothing (a sync.Map boxes a struct key into an
// interface, an allocation per lookup); a writer copies the map. Each Add
// bounds its size, for caches of facts that callers could otherwise grow
// without end.
package cowmap

import (
	"maps"
	"sync"
	"sync/atomic"
)

// Map is a copy-on-write map. Its zero value is empty and ready; it is
// safe for concurrent use.
type Map[K comparable, V any] struct {
	m  atomic.Pointer[map[K]V] // replaced, never written, once stored
	mu sync.Mutex              // held by writers
}

// Get returns k's value, if the map holds it.
func (c *Map[K, V]) Get(k K) (V, bool) {
	if m := c.m.Load(); m != nil {
		v, ok := (*m)[k]
		return v, ok
	}
	var zero V
	return zero, false
}

// Add keeps v as k's value unless the map holds k already, or max
// entries, and returns the value k has: the one held before, or v.
func (c *Map[K, V]) Add(k K, v V, max int) V {
	c.mu.Lock()
	defer c.mu.Unlock()
	var old map[K]V
	if m := c.m.Load(); m != nil {
		old = *m
	}
	if held, ok := old[k]; ok {
		return held
	}
	if len(old) >= max {
		return v
	}
	m := make(map[K]V, len(old)+1)
	maps.Copy(m, old)
	m[k] = v
	c.m.Store(&m)
	return v
}

// Len returns the number of entries.
func (c *Map[K, V]) Len() int {
	if m := c.m.Load(); m != nil {
		return len(*m)
	}
	return 0
}
