// Package partial helps tests build store.Store doubles: embed Store and
// define the methods the double needs; the others fail with an error
// wrapping errors.ErrUnsupported.
package partial

import (
	"context"
	"errors"

	"github.com/sluicehq/sluice/core/store"
)

// Store implements store.Store, every method failing with errors.ErrUnsupported.
type Store struct{}

func (Store) Take(context.Context, string, int64, ...store.Spec) (store.Result, error) {
	return store.Result{}, errors.ErrUnsupported
}

func (Store) Charge(context.Context, string, int64, ...store.Spec) (store.Result, error) {
	return store.Result{}, errors.ErrUnsupported
}

func (Store) Peek(context.Context, string, int64, ...store.Spec) (store.Result, error) {
	return store.Result{}, errors.ErrUnsupported
}

func (Store) Refund(context.Context, string, int64, int64, ...store.Spec) error {
	return errors.ErrUnsupported
}

func (Store) Release(context.Context, string, int64, ...store.Spec) error {
	return errors.ErrUnsupported
}

func (Store) Reset(context.Context, string, ...store.Spec) error { return errors.ErrUnsupported }
