package memorystore

import (
	"context"

	"github.com/sluicehq/sluice/core/store"
)

// Charge is Take, and sets the Result's Stamp to the store's clock at the
// decision, for Refund.
func (s *Store) Charge(ctx context.Context, key string, n int64, limits ...store.Spec) (store.Result, error) {
	var res store.Result
	err := s.take(ctx, key, n, limits, &res, true)
	return res, err
}

// Refund gives back n units that an allowed Charge of key over limits
// made at stamp took, with the give-back of ALGORITHMS.md ("Giving back a
// charge"), limit by limit, at one instant. A state that has expired, or
// the units of a window or a log entry that has passed, get nothing back.
// It never sets nor lifts a penalty lock. It fails like Take for bad input
// and otherwise never fails.
func (s *Store) Refund(ctx context.Context, key string, n int64, stamp int64, limits ...store.Spec) error {
	if err := s.checkInput(ctx, key, n, limits); err != nil {
		return err
	}
	evs := make([]limitEval, len(limits))
	if err := specsOf(limits, evs); err != nil {
		return err
	}
	key, digest := storedKey(key)
	sh, h := s.shardOf(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	now := s.now().UnixMicro()
	for i := range evs {
		e := &evs[i]
		dup := false
		for j := 0; j < i; j++ {
			dup = dup || evs[j].sp.sameState(&e.sp)
		}
		st, ok := sh.find(h, key, digest, &e.sp)
		if !ok || dup || !st.has || now >= st.expires || n == 0 || gives[e.sp.alg] == nil {
			continue
		}
		gives[e.sp.alg](st, &e.sp, now, n, stamp) // n units back to st, a live state
	}
	return nil
}
