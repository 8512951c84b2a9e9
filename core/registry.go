package core

import (
	"fmt"
	"reflect"
	"runtime"
	"sync"

	"github.com/sluicehq/sluice/core/store"
)

// registry holds, per store and Limiter name, how many live Limiters of
// this process use that namespace, so that New can refuse a second one
// made by mistake (see WithSharedState). An entry is removed when its last
// Limiter is garbage-collected (runtime.AddCleanup), so the registry holds
// a store only while a Limiter on it lives.
var registry = struct {
	sync.Mutex
	m map[registration]*registered
}{m: make(map[registration]*registered)}

// registration is a namespace of one store: its Limiters' name.
type registration struct {
	s    store.Store
	name string
}

type registered struct {
	n      int  // live Limiters
	shared bool // all of them asked for WithSharedState
}

// register records l in the registry, or fails when another live Limiter
// has its name on its store and not both asked for sharing. Stores that
// cannot be map keys (a struct holding a slice, say) are not registered,
// nor stores of a zero-size type: those hold no state to share, and all
// their values are equal.
func (l *Limiter) register(shared bool) error {
	v := reflect.ValueOf(l.store)
	if v.Type().Size() == 0 || !v.Comparable() {
		return nil
	}
	k := registration{l.store, l.name}
	registry.Lock()
	defer registry.Unlock()
	e := registry.m[k]
	switch {
	case e == nil:
		e = &registered{shared: shared}
		registry.m[k] = e
	case !e.shared || !shared:
		return fmt.Errorf("%w: %s already uses this store in this process, and Limiters of one name on one store share their state: "+
			"give each its own name (WithName), or pass WithSharedState to every one of them to share it on purpose",
			ErrInvalidOption, l.describe())
	}
	e.n++
	runtime.AddCleanup(l, unregister, k)
	return nil
}

// describe names l for an error message.
func (l *Limiter) describe() string {
	if l.name == "" {
		return "an unnamed Limiter (name \"\")"
	}
	return fmt.Sprintf("a Limiter named %q", l.name)
}

// unregister releases a Limiter's registration once it is collected.
func unregister(k registration) {
	registry.Lock()
	defer registry.Unlock()
	if e := registry.m[k]; e != nil {
		if e.n--; e.n <= 0 {
			delete(registry.m, k)
		}
	}
}
