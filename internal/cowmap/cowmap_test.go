package cowmap

import (
	"sync"
	"testing"
)

func TestMap(t *testing.T) {
	var m Map[[2]int, string]
	if _, ok := m.Get([2]int{1, 2}); ok || m.Len() != 0 {
		t.Fatal("the zero Map holds something")
	}
	if v := m.Add([2]int{1, 2}, "a", 2); v != "a" {
		t.Errorf("Add = %q, want a", v)
	}
	if v := m.Add([2]int{1, 2}, "b", 2); v != "a" {
		t.Errorf("Add of a held key = %q, want the held a", v)
	}
	m.Add([2]int{3, 4}, "c", 2)
	if v := m.Add([2]int{5, 6}, "d", 2); v != "d" || m.Len() != 2 {
		t.Errorf("Add past max = %q, Len %d: want d returned and 2 kept", v, m.Len())
	}
	if _, ok := m.Get([2]int{5, 6}); ok {
		t.Error("a key added past max is held")
	}
	if v, ok := m.Get([2]int{3, 4}); !ok || v != "c" {
		t.Errorf("Get = %q, %v; want c, true", v, ok)
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = m.Get([2]int{1, 2}) }); n != 0 {
		t.Errorf("Get: %v allocations, want 0", n)
	}
}

func TestMapConcurrent(t *testing.T) {
	var m Map[int, int]
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				if v := m.Add(i, g, 1000); v < 0 || v >= 8 {
					t.Errorf("Add(%d) = %d", i, v)
				}
				if _, ok := m.Get(i); !ok {
					t.Errorf("key %d lost after its Add", i)
				}
			}
		}()
	}
	wg.Wait()
	if m.Len() != 200 {
		t.Errorf("Len = %d, want 200", m.Len())
	}
}
