package core

import (
	"fmt"
	"reflect"

	"github.com/sluicehq/sluice/core/store"
)

// checkStore returns an error wrapping ErrInvalidOption when s, the store
// named what, is nil or holds a nil pointer, map, func or chan (a typed
// nil, such as a nil *memorystore.Store, which s == nil does not catch and which
// would fail or panic at every request).
func checkStore(what string, s store.Store) error {
	switch {
	case s == nil:
		return fmt.Errorf("%w: %s is nil", ErrInvalidOption, what)
	case isTypedNil(s):
		return fmt.Errorf("%w: %s is a nil %T", ErrInvalidOption, what, s)
	}
	return nil
}

// isTypedNil reports whether v holds a nil pointer, map, func, chan or
// interface.
func isTypedNil(v any) bool {
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Func, reflect.Chan, reflect.Interface:
		return rv.IsNil()
	}
	return false
}
