package redisstore

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/core/store"
)

// An InFlight admission removes at most 1024 expired slots, after its
// ZADD, so that no call's work grows with R: 3000 expired slots of a
// limit of 5000 (slots whose holders vanished) take three admissions to
// clear, and the key's members never exceed R. The slots are the
// take script's members, written directly.
func TestMiniInFlightTrimBounded(t *testing.T) {
	x := newMini(t)
	l := store.MaxInFlight(5000, time.Second)
	sp, err := l.Spec()
	if err != nil {
		t.Fatal(err)
	}
	key := x.store.redisKey("k", stateSuffix(&sp))
	zs := make([]redis.Z, 3000)
	for i := range zs {
		zs[i] = redis.Z{Score: float64(x.now.UnixMicro() + int64(i)), Member: strconv.Itoa(i + 1)}
	}
	ctx := context.Background()
	if err := x.client.ZAdd(ctx, key, zs...).Err(); err != nil {
		t.Fatal(err)
	}
	x.advance(time.Second) // every one expired
	for i, want := range []int64{3000 - 1024 + 1, 3000 - 2048 + 2, 3} {
		r := x.take("k", 1, l)
		if !r.Allowed || r.Remaining != 5000-int64(i)-1 {
			t.Fatalf("admission %d: %+v, want allowed, %d remaining", i, r, 5000-i-1)
		}
		if got := x.client.ZCard(ctx, key).Val(); got != want {
			t.Errorf("after admission %d: %d members, want %d", i, got, want)
		}
	}
	if ttl := x.m.TTL(key); ttl <= 0 || ttl > time.Second {
		t.Errorf("TTL %v, want (0, 1s]", ttl)
	}
}

// An InFlight refusal's RetryAfter is the time to the earliest expiry,
// capped at 1 s, and its ResetAfter the time to the latest; a slot is free
// once its expiry is reached.
func TestMiniInFlightRetry(t *testing.T) {
	x := newMini(t)
	l := store.MaxInFlight(2, 3*time.Second)
	x.take("k", 1, l)
	x.advance(time.Second)
	x.take("k", 1, l)
	steps := []struct {
		after       time.Duration
		retry, rest time.Duration
	}{
		{0, time.Second, 3 * time.Second},
		{1500 * time.Millisecond, 500 * time.Millisecond, 1500 * time.Millisecond},
	}
	for _, s := range steps {
		x.advance(s.after)
		r := x.take("k", 1, l)
		if r.Allowed || r.Remaining != 0 || r.Limit != 2 || r.RetryAfter != s.retry || r.ResetAfter != s.rest || r.Slot != 0 {
			t.Errorf("after %v more: %+v, want denied, retry %v, reset %v", s.after, r, s.retry, s.rest)
		}
	}
	x.advance(500 * time.Millisecond) // the first slot expires
	if r := x.take("k", 1, l); !r.Allowed || r.Remaining != 0 || r.Slot == 0 {
		t.Errorf("once the first slot expired: %+v, want allowed with a slot", r)
	}
}

var _ store.Store = (*Store)(nil)

// Charge reports the slot and the stamp of a Take with an InFlight limit,
// and Refund of its rate charge leaves the slot alone (Release frees it).
func TestMiniInFlightChargeRefund(t *testing.T) {
	x := newMini(t)
	ctx := context.Background()
	lims := specs(store.MaxInFlight(1, time.Hour), store.Limit{Algorithm: store.TokenBucket, Rate: 2, Period: time.Hour})
	r, err := x.store.Charge(ctx, "k", 1, lims...)
	if err != nil || !r.Allowed || r.Slot == 0 || r.Stamp != x.now.UnixMicro() {
		t.Fatalf("Charge: %+v, %v; want allowed with a slot and the stamp %d", r, err, x.now.UnixMicro())
	}
	if err := x.store.Refund(ctx, "k", 1, r.Stamp, lims...); err != nil {
		t.Fatalf("Refund: %v", err)
	}
	if got := x.take("k", 0, store.MaxInFlight(1, time.Hour)); got.Remaining != 0 {
		t.Errorf("the slot after a Refund: %d free, want 0 (only Release frees it)", got.Remaining)
	}
	if got := x.take("k", 0, store.Limit{Algorithm: store.TokenBucket, Rate: 2, Period: time.Hour}); got.Remaining != 2 {
		t.Errorf("the rate after a Refund: %d left, want 2", got.Remaining)
	}
	if err := x.store.Release(ctx, "k", r.Slot, lims...); err != nil {
		t.Fatal(err)
	}
	if got := x.take("k", 0, store.MaxInFlight(1, time.Hour)); got.Remaining != 1 {
		t.Errorf("the slot after Release: %d free, want 1", got.Remaining)
	}
}
