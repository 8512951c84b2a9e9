package core_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/internal/partial"
)

// ptrStore, mapStore and funcStore are stores of each kind that can be a
// typed nil; valueStore is one that cannot.
type ptrStore struct {
	partial.Store
	calls int64
}

func (s *ptrStore) Take(context.Context, string, int64, ...store.Spec) (store.Result, error) {
	s.calls++ // a nil *ptrStore panics here
	return store.Result{Allowed: true}, nil
}

type mapStore map[string]int64

func (mapStore) Take(context.Context, string, int64, ...store.Spec) (store.Result, error) {
	return store.Result{Allowed: true}, nil
}

type funcStore func() store.Result

func (mapStore) Charge(context.Context, string, int64, ...store.Spec) (store.Result, error) {
	return store.Result{}, errors.ErrUnsupported
}
func (mapStore) Peek(context.Context, string, int64, ...store.Spec) (store.Result, error) {
	return store.Result{}, errors.ErrUnsupported
}
func (mapStore) Refund(context.Context, string, int64, int64, ...store.Spec) error {
	return errors.ErrUnsupported
}
func (mapStore) Release(context.Context, string, int64, ...store.Spec) error {
	return errors.ErrUnsupported
}
func (mapStore) Reset(context.Context, string, ...store.Spec) error { return errors.ErrUnsupported }
func (funcStore) Charge(context.Context, string, int64, ...store.Spec) (store.Result, error) {
	return store.Result{}, errors.ErrUnsupported
}
func (funcStore) Peek(context.Context, string, int64, ...store.Spec) (store.Result, error) {
	return store.Result{}, errors.ErrUnsupported
}
func (funcStore) Refund(context.Context, string, int64, int64, ...store.Spec) error {
	return errors.ErrUnsupported
}
func (funcStore) Release(context.Context, string, int64, ...store.Spec) error {
	return errors.ErrUnsupported
}
func (funcStore) Reset(context.Context, string, ...store.Spec) error { return errors.ErrUnsupported }

func (f funcStore) Take(context.Context, string, int64, ...store.Spec) (store.Result, error) {
	return f(), nil
}

type valueStore struct{ partial.Store }

func (valueStore) Take(context.Context, string, int64, ...store.Spec) (store.Result, error) {
	return store.Result{Allowed: true}, nil
}

func typedNilKey(*http.Request) (string, error) { return "k", nil }

// A typed nil inside the Store interface (a nil *redisstore.Store, a nil
// *memorystore.Store) is refused by New, instead of failing, or
// panicking, at every request.
func TestNewRefusesTypedNilStore(t *testing.T) {
	limits := []store.Limit{store.PerSecond(1)}
	var (
		mem *memorystore.Store
		ptr *ptrStore
		m   mapStore
		f   funcStore
	)
	for name, tc := range map[string]struct {
		store store.Store
		opts  []core.Option
		want  string
	}{
		"nil *MemoryStore":           {mem, nil, "store is a nil *memorystore.Store"},
		"nil pointer of a test type": {ptr, nil, "store is a nil *core_test.ptrStore"},
		"nil map":                    {m, nil, "store is a nil core_test.mapStore"},
		"nil func":                   {f, nil, "store is a nil core_test.funcStore"},
		"nil":                        {nil, nil, "store is nil"},
	} {
		l, err := core.New(tc.store, "test", typedNilKey, limits, tc.opts...)
		if !errors.Is(err, core.ErrInvalidOption) || l != nil {
			t.Errorf("%s: %v, %v; want ErrInvalidOption", name, l, err)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %q does not say %q", name, err, tc.want)
		}
	}
	// Stores that are not nil, whatever their kind, are accepted.
	for name, s := range map[string]store.Store{
		"value": valueStore{}, "map": mapStore{}, "func": funcStore(func() store.Result { return store.Result{} }),
		"pointer": &ptrStore{},
	} {
		if _, err := core.New(s, "test", typedNilKey, limits); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}
