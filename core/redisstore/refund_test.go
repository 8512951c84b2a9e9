package redisstore

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/store"
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
		lim  core.Limit
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
		{core.Limit{Algorithm: core.GCRA, Rate: 3, Period: P}, map[int]int64{2: 0, 3: 0, 5: 1, 6: 0, 9: 3, 13: 3}},
		{core.Limit{Algorithm: core.LeakyBucket, Rate: 3, Period: P, Burst: 2}, nil},
		{core.Limit{Algorithm: core.TokenBucket, Rate: 3, Period: P}, map[int]int64{5: 1, 6: 0}},
		{core.Limit{Algorithm: core.FixedWindow, Rate: 3, Period: P}, map[int]int64{2: 0, 5: 1, 6: 0, 7: 3, 9: 3, 11: 3}},
		{core.Limit{Algorithm: core.SlidingWindow, Rate: 3, Period: P}, map[int]int64{5: 1, 6: 0, 7: 0, 9: 1, 11: 2, 13: 3}},
		{core.Limit{Algorithm: core.SlidingLog, Rate: 3, Period: P}, map[int]int64{5: 1, 6: 0, 7: 1, 9: 1, 11: 2, 13: 3}},
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
