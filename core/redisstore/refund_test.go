package redisstore

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/internal/redistest"
)

// refundStep is one step of TestMiniRefundMatchesMemory: at offset from
// t0, charge one unit (naming the charge), give back a named charge, or
// peek; wantRem, when not -1, is the hand-computed Remaining after it.
type refundStep struct {
	at      time.Duration
	op      string // "charge", "refund", "peek"
	name    string
	wantRem int64
}

// Every algorithm's give-back (ALGORITHMS.md, "Giving back a charge") on
// the memory store and on miniredis, at the same clock: every Result the
// same, and the hand-computed Remaining figures of the window algorithms
// and GCRA (3 per 10 s): a give-back within the window frees a unit; a
// fixed window's charge of a window that has ended gives nothing back; a
// sliding window's charge of the previous window takes a unit off its
// weight; a sliding log's entry gives back only while it is live.
func TestMiniRefundMatchesMemory(t *testing.T) {
	const P = 10 * time.Second
	type algo struct {
		lim  store.Limit
		rems map[int]int64 // step index → hand-computed Remaining
	}
	steps := []refundStep{
		{0, "charge", "A", -1},
		{time.Second, "charge", "B", -1},
		{2 * time.Second, "charge", "C", -1},
		{3 * time.Second, "charge", "D", -1}, // denied
		{3 * time.Second, "refund", "B", -1},
		{3 * time.Second, "peek", "", -1},
		{3 * time.Second, "charge", "E", -1},
		{11 * time.Second, "peek", "", -1},
		{11 * time.Second, "refund", "A", -1},
		{11 * time.Second, "peek", "", -1},
		{11 * time.Second, "refund", "C", -1},
		{11 * time.Second, "peek", "", -1},
		{11 * time.Second, "refund", "E", -1},
		{11 * time.Second, "peek", "", -1},
	}
	algos := []algo{
		{store.Limit{Algorithm: store.GCRA, Rate: 3, Period: P}, map[int]int64{2: 0, 3: 0, 5: 1, 6: 0, 9: 3, 13: 3}},
		{store.Limit{Algorithm: store.LeakyBucket, Rate: 3, Period: P, Burst: 2}, nil},
		{store.Limit{Algorithm: store.TokenBucket, Rate: 3, Period: P}, map[int]int64{5: 1, 6: 0}},
		{store.Limit{Algorithm: store.FixedWindow, Rate: 3, Period: P}, map[int]int64{2: 0, 5: 1, 6: 0, 7: 3, 9: 3, 11: 3}},
		{store.Limit{Algorithm: store.SlidingWindow, Rate: 3, Period: P}, map[int]int64{5: 1, 6: 0, 7: 0, 9: 1, 11: 2, 13: 3}},
		{store.Limit{Algorithm: store.SlidingLog, Rate: 3, Period: P}, map[int]int64{5: 1, 6: 0, 7: 1, 9: 1, 11: 2, 13: 3}},
	}
	ctx := context.Background()
	for _, a := range algos {
		t.Run(string(a.lim.Algorithm), func(t *testing.T) {
			x := newMini(t)
			now := t0
			mem := memorystore.New(memorystore.WithClock(func() time.Time { return now }))
			sp := specs(a.lim)
			stamps := map[string][2]int64{} // memory's, Redis'
			for i, s := range steps {
				if d := t0.Add(s.at).Sub(now); d > 0 {
					now = now.Add(d)
					x.advance(d)
				}
				var rm, rr store.Result
				var em, er error
				switch s.op {
				case "charge":
					rm, em = mem.Charge(ctx, "k", 1, sp...)
					rr, er = x.store.Charge(ctx, "k", 1, sp...)
					if rm.Allowed {
						stamps[s.name] = [2]int64{rm.Stamp, rr.Stamp}
					}
					if rm.Stamp != now.UnixMicro() || rr.Stamp != now.UnixMicro() {
						t.Errorf("step %d: stamps %d (memory), %d (Redis), want %d", i, rm.Stamp, rr.Stamp, now.UnixMicro())
					}
				case "refund":
					st, ok := stamps[s.name]
					if !ok {
						t.Fatalf("step %d: charge %s was not allowed", i, s.name)
					}
					em = mem.Refund(ctx, "k", 1, st[0], sp...)
					er = x.store.Refund(ctx, "k", 1, st[1], sp...)
				case "peek":
					rm, em = mem.Peek(ctx, "k", 0, sp...)
					rr, er = x.store.Peek(ctx, "k", 0, sp...)
				}
				if em != nil || er != nil {
					t.Fatalf("step %d (%s %s): %v, %v", i, s.op, s.name, em, er)
				}
				if s.op == "refund" {
					continue
				}
				rm.Stamp, rr.Stamp = 0, 0
				if !reflect.DeepEqual(rm, rr) {
					t.Errorf("step %d (%s %s): memory %+v, Redis %+v", i, s.op, s.name, rm, rr)
				}
				if w, ok := a.rems[i]; ok && rm.Remaining != w {
					t.Errorf("step %d (%s %s): Remaining %d, want %d", i, s.op, s.name, rm.Remaining, w)
				}
				if i == 3 && rm.Allowed {
					t.Errorf("step 3: the fourth charge was allowed")
				}
			}
			x.ttlsAll()
		})
	}
}

// Random charges of cost 1 or 2, give-backs of earlier charges (some twice,
// some long after) and clock moves, on every algorithm at once (each with
// a penalty, one limit given twice) and on each alone: the memory store
// and miniredis give every Charge and Peek the same Result, and every key
// keeps a TTL. The same with every Charge and Refund of several keys split
// (as after TRYAGAIN): one call per key.
func TestMiniRefundRandomMatchesMemory(t *testing.T) {
	redistest.Slow(t)
	for _, split := range []bool{false, true} {
		t.Run(fmt.Sprint("split ", split), func(t *testing.T) { refundRandom(t, split) })
	}
}

// splitCharge is Store.Charge as it goes when its call meets TRYAGAIN.
func splitCharge(ctx context.Context, s *Store, key string, n int64, limits []store.Spec) (store.Result, error) {
	sp := s.splitOfSpecs(key, limits)
	c := scriptCall{script: takeScript, m: len(limits), stamped: true, splits: true, limits: sp.limits}
	v, stamp, err := sp.take(ctx, s, n)
	if err != nil {
		return store.Result{}, err
	}
	return c.decodeInts(append(v, stamp), n)
}

// splitRefund is Store.Refund as it goes when its call meets TRYAGAIN.
func splitRefund(ctx context.Context, s *Store, key string, n, stamp int64, limits []store.Spec) error {
	return s.splitOfSpecs(key, limits).refundAll(ctx, s, n, stamp)
}

func refundRandom(t *testing.T, split bool) {
	const P = 10 * time.Second
	all := []store.Limit{
		{Algorithm: store.GCRA, Rate: 4, Period: P, Penalty: 3 * time.Second},
		{Algorithm: store.LeakyBucket, Rate: 4, Period: P, Burst: 3},
		{Algorithm: store.TokenBucket, Rate: 4, Period: P, Burst: 5},
		{Algorithm: store.FixedWindow, Rate: 4, Period: P, Penalty: 2 * time.Second},
		{Algorithm: store.SlidingWindow, Rate: 4, Period: P},
		{Algorithm: store.SlidingLog, Rate: 4, Period: P},
	}
	sets := [][]store.Limit{append(all, all[5])}
	for _, l := range all {
		sets = append(sets, []store.Limit{l})
	}
	ctx := context.Background()
	for si, set := range sets {
		x := newMini(t)
		now := t0
		mem := memorystore.New(memorystore.WithClock(func() time.Time { return now }))
		sp := specs(set...)
		type charge struct {
			n      int64
			stamps [2]int64
		}
		var charges []charge
		rnd := uint64(si + 1)
		next := func(k uint64) uint64 { rnd = rnd*6364136223846793005 + 1442695040888963407; return (rnd >> 33) % k }
		for step := 0; step < 300; step++ {
			if d := time.Duration(next(4)) * 700 * time.Millisecond; next(2) == 0 && d > 0 {
				now = now.Add(d)
				x.advance(d)
			}
			var rm, rr store.Result
			var em, er error
			switch op := next(3); {
			case op == 0 && len(charges) > 0:
				c := charges[next(uint64(len(charges)))]
				em = mem.Refund(ctx, "k", c.n, c.stamps[0], sp...)
				if split {
					er = splitRefund(ctx, x.store, "k", c.n, c.stamps[1], sp)
				} else {
					er = x.store.Refund(ctx, "k", c.n, c.stamps[1], sp...)
				}
				rm, _ = mem.Peek(ctx, "k", 0, sp...)
				rr, _ = x.store.Peek(ctx, "k", 0, sp...)
			default:
				n := int64(1 + next(2))
				rm, em = mem.Charge(ctx, "k", n, sp...)
				if split {
					rr, er = splitCharge(ctx, x.store, "k", n, sp)
				} else {
					rr, er = x.store.Charge(ctx, "k", n, sp...)
				}
				if rm.Allowed && rr.Allowed {
					charges = append(charges, charge{n, [2]int64{rm.Stamp, rr.Stamp}})
				}
			}
			if em != nil || er != nil {
				t.Fatalf("set %d step %d: %v, %v", si, step, em, er)
			}
			rm.Stamp, rr.Stamp = 0, 0
			if !reflect.DeepEqual(rm, rr) {
				t.Fatalf("set %d step %d: memory %+v, Redis %+v", si, step, rm, rr)
			}
		}
		if len(charges) < 20 {
			t.Errorf("set %d: only %d charges allowed", si, len(charges))
		}
		x.ttlsAll()
	}
}

// The sliding log's give-back on a log whose members hold several units
// each ("<first>+<w>", one member per request): units come off the last
// members of the charge's stamp, and the members after them are renamed so
// that unit numbers stay consecutive.
func TestMiniRefundLogWeighted(t *testing.T) {
	x := newMini(t)
	lim := store.Limit{Algorithm: store.SlidingLog, Rate: 10, Period: 10 * time.Second}
	key := x.keyOf("k", lim)
	us := float64(t0.UnixMicro())
	for _, m := range []struct {
		name string
		at   float64
	}{{"0000000000000000+3", us}, {"0000000000000003+2", us + 1e6}, {"0000000000000005", us + 2e6}} {
		if _, err := x.m.ZAdd(key, m.at, m.name); err != nil {
			t.Fatal(err)
		}
	}
	x.advance(3 * time.Second)
	members := func() []string {
		t.Helper()
		ms, err := x.m.ZMembers(key)
		if err != nil {
			t.Fatal(err)
		}
		return ms
	}
	ctx := context.Background()
	if err := x.store.Refund(ctx, "k", 1, t0.UnixMicro()+1_000_000, specs(lim)...); err != nil {
		t.Fatal(err)
	}
	if got, want := members(), []string{"0000000000000000+3", "0000000000000003", "0000000000000004"}; !reflect.DeepEqual(got, want) {
		t.Errorf("after giving back 1 unit of the second request: %q, want %q", got, want)
	}
	if err := x.store.Refund(ctx, "k", 5, t0.UnixMicro(), specs(lim)...); err != nil {
		t.Fatal(err)
	}
	if got, want := members(), []string{"0000000000000000", "0000000000000001"}; !reflect.DeepEqual(got, want) {
		t.Errorf("after giving back the first request's 3 units: %q, want %q", got, want)
	}
	if s, _ := x.m.ZScore(key, "0000000000000001"); s != us+2e6 {
		t.Errorf("the last member's stamp: %v, want %v", s, us+2e6)
	}
	if r := x.take("k", 0, lim); r.Remaining != 8 {
		t.Errorf("Remaining after the give-backs: %d, want 8", r.Remaining)
	}
}

// A give-back that renames the only members of a sliding log keeps the
// set, and so its TTL: a partial give-back of a charge of several units,
// and a split decision's give-back of its charge after another Take of the
// log (whose member is renamed once ours is gone).
func TestMiniRefundLogKeepsTTL(t *testing.T) {
	ctx := context.Background()
	lim := store.Limit{Algorithm: store.SlidingLog, Rate: 5, Period: 10 * time.Second}

	x := newMini(t)
	r, err := x.store.Charge(ctx, "k", 3, specs(lim)...)
	if err != nil || !r.Allowed {
		t.Fatal(r, err)
	}
	if err := x.store.Refund(ctx, "k", 1, r.Stamp, specs(lim)...); err != nil {
		t.Fatal(err)
	}
	x.ttlsAll()
	if got := x.take("k", 0, lim).Remaining; got != 3 {
		t.Errorf("after 3 charged and 1 given back: %d remaining, want 3", got)
	}

	x = newMini(t)
	fw := store.Limit{Algorithm: store.FixedWindow, Rate: 5, Period: 10 * time.Second}
	sp := x.store.splitOfSpecs("k", specs(lim, fw))
	v, _, at, err := sp.one(ctx, x.store, sp.limits[0], 2) // the split charges the log
	if err != nil || v[0] < 0 {
		t.Fatal(v, err)
	}
	x.advance(time.Millisecond)
	if r := x.take("k", 1, lim); !r.Allowed { // another Take, in between
		t.Fatal(r)
	}
	if err := sp.giveBack(ctx, x.store, sp.limits[0], 2, at); err != nil { // another limit denied
		t.Fatal(err)
	}
	x.ttlsAll()
	if got := x.take("k", 0, lim).Remaining; got != 4 {
		t.Errorf("after the give-back: %d remaining, want 4 (the other Take's unit)", got)
	}
}
