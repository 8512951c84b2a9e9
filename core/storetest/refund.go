package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/store"
)

// testRefund checks Charge and Refund: under
// each algorithm (3 per hour) and under all of them at once, a key charged
// to its limit through one instance and given one charge back through the
// other admits exactly one more; a give-back of a key without state
// changes nothing; bad input fails like Take.
func (s *suite) testRefund(t *testing.T) {
	stores := s.stores(t)
	r0, r1 := stores[0], stores[1]
	var all []store.Limit
	for _, a := range []store.Algorithm{store.GCRA, store.TokenBucket, store.FixedWindow, store.SlidingWindow, store.SlidingLog, store.LeakyBucket} {
		all = append(all, store.Limit{Algorithm: a, Rate: 3, Period: time.Hour})
	}
	warmUp(t, all, stores[:]...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sets := [][]store.Limit{all}
	for _, l := range all {
		sets = append(sets, []store.Limit{l})
	}
	for _, set := range sets {
		name := "Several"
		if len(set) == 1 {
			name = string(set[0].Algorithm)
		}
		t.Run(name, func(t *testing.T) { s.testRefundOne(t, ctx, r0, r1, set) })
	}
	key := newKey(t)
	if err := r1.Refund(ctx, key, 1, 1, specs(all)...); err != nil {
		t.Errorf("Refund of a key without state: %v", err)
	}
	if res := mustTake(t, stores[0], key, 0, all...); !res.Allowed || res.Remaining != 3 {
		t.Errorf("after a Refund of a key without state: %s, want a fresh key's figures", fmtResult(res))
	}
	if err := r1.Refund(ctx, "", 1, 1, specs(all)...); !errors.Is(err, store.ErrEmptyKey) {
		t.Errorf("Refund with an empty key: %v, want ErrEmptyKey", err)
	}
	if err := r1.Refund(ctx, key, -1, 1, specs(all)...); !errors.Is(err, store.ErrNegativeCost) {
		t.Errorf("Refund of -1: %v, want ErrNegativeCost", err)
	}
}

func (s *suite) testRefundOne(t *testing.T, ctx context.Context, r0, r1 store.Store, set []store.Limit) {
	key := newKey(t)
	sp := specs(set)
	var stamps []int64
	for len(stamps) <= 4 {
		res, err := r0.Charge(ctx, key, 1, sp...)
		if err != nil {
			t.Fatalf("charge %d: %v", len(stamps)+1, err)
		}
		if !res.Allowed {
			break
		}
		stamps = append(stamps, res.Stamp)
	}
	want := sp[0].Capacity() // the least capacity (LeakyBucket's is Burst + 1)
	for i := range sp {
		want = min(want, sp[i].Capacity())
	}
	if int64(len(stamps)) != want {
		t.Fatalf("%d charges allowed, want the capacity, %d", len(stamps), want)
	}
	if err := r1.Refund(ctx, key, 1, stamps[1], sp...); err != nil {
		t.Fatalf("Refund: %v", err)
	}
	if res, err := r0.Charge(ctx, key, 1, sp...); err != nil || !res.Allowed || res.Remaining != 0 {
		t.Errorf("after giving one charge back: %s, %v; want allowed with 0 remaining", fmtResult(res), err)
	}
	if res, err := r0.Charge(ctx, key, 1, sp...); s.exact && (err != nil || res.Allowed) {
		t.Errorf("after using the unit given back: %s, %v; want denied", fmtResult(res), err)
	}
}
