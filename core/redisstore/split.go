package redisstore

import (
	"context"
	"fmt"

	"github.com/sluicehq/sluice/core/store"
)

// lockScript reads, and when asked sets, one penalty lock (lua/lock.lua).
var lockScript = newScript(lockSource)

// split is a Take of several Redis keys (limits with penalties, several
// limits) as calls of one key each, for when a Cluster answers TRYAGAIN.
//
// A Cluster node refuses a script of several keys with TRYAGAIN while a
// slot migration has moved some of them and not the others, and a penalty
// lock, which exists only while it holds, counts as not moved: a Take with
// a penalty meets TRYAGAIN for as long as its slot migrates, which for a
// slot of many keys outlasts any deadline. One key per call never meets
// it: the node that holds the key runs the call, or names the one that
// does (ASK). So on TRYAGAIN the Store decides the Take again with one
// call per key, replying as the take script would: it reads the penalty
// locks; then, when none holds, it charges each limit until one denies
// (dry runs after it), gives back what the earlier ones took (an InFlight
// limit's slot freed) and reports what they then allow; when a lock
// holds, it charges nothing (dry runs); and it sets the lock of each limit
// with a penalty that denied.
//
// This is not atomic as the take script is, but never admits more than a
// limit allows: each charge is atomic in its key. Units taken and given
// back may deny another Take in between, a lock set between a Take's
// reading of the locks and its charges does not stop it, and a Take that
// fails part way (its deadline) leaves what it charged charged.
type split struct {
	base    string // the Take's tagged Redis key, to which suffixes are added
	limits  []*prepared
	slotted bool // one limit is InFlight: the reply ends with its slot
}

// splitOf returns the split of a Take of key over the limits takeCall
// prepared (see splittable).
func (s *Store) splitOf(key string, limits []*prepared) *split {
	sp := &split{base: s.redisKey(key, ""), limits: limits}
	for _, p := range limits {
		sp.slotted = sp.slotted || p.alg == store.InFlight
	}
	return sp
}

// splittable reports whether a Take of limits may be split: not when they
// hold two InFlight limits (two states), as the take script gives both one
// slot id, which calls of one key each cannot.
func splittable(limits []*prepared) bool {
	inFlight := ""
	for _, p := range limits {
		if p.alg == store.InFlight {
			if inFlight != "" && inFlight != p.state {
				return false
			}
			inFlight = p.state
		}
	}
	return true
}

// take decides a Take of n (0: a peek; negative: a dry run of -n) and
// returns the take script's reply for it (with the slot taken when
// slotted), and the earliest stamp of its calls: given back at it
// (Refund), a limit charged later gets back nothing of a window that
// began in between, and a log's oldest units at or after it, so never
// more than it took.
func (sp *split) take(ctx context.Context, s *Store, n int64) (reply []int64, stamp int64, err error) {
	const k = repliesPerLimit
	left, locked, err := sp.locks(ctx, s)
	if err != nil {
		return nil, 0, err
	}
	out := make([]int64, k*len(sp.limits))
	costs := make([]int64, len(sp.limits)) // what each call was sent
	marks := make([]int64, len(sp.limits)) // each charge's stamp, or an InFlight limit's slot
	all, slot := !locked, int64(0)
	for i, p := range sp.limits {
		if j := sp.same(i); j < i { // one state: evaluated once, as the script does
			copy(out[k*i:k*i+k], out[k*j:])
			continue
		}
		c := n
		switch {
		case left[i] > 0:
			c = 0 // a locked limit reports what a peek sees
		case !all && n > 0:
			c = -n // a lock holds, or a limit denied: nothing more is charged
		}
		costs[i] = c
		v, taken, at, err := sp.one(ctx, s, p, c)
		if err != nil {
			return nil, 0, err
		}
		copy(out[k*i:], v)
		marks[i] = at
		if p.alg == store.InFlight {
			marks[i], slot = taken, taken
		}
		if stamp == 0 || at < stamp {
			stamp = at
		}
		all = all && v[0] >= 0
	}
	if all {
		return sp.withSlot(out, slot), stamp, nil
	}
	for i, p := range sp.limits {
		if j := sp.same(i); j < i {
			copy(out[k*i:k*i+k], out[k*j:])
			continue
		}
		if err := sp.settle(ctx, s, p, n, costs[i], left[i], out[k*i:k*i+k], marks[i]); err != nil {
			return nil, 0, err
		}
	}
	return sp.withSlot(out, 0), stamp, nil
}

// withSlot appends slot to out when the reply carries one.
func (sp *split) withSlot(out []int64, slot int64) []int64 {
	if sp.slotted {
		return append(out, slot)
	}
	return out
}

// locks returns how long each limit's penalty lock still holds (µs, 0 for
// none), and whether one does.
func (sp *split) locks(ctx context.Context, s *Store) (left []int64, locked bool, err error) {
	left = make([]int64, len(sp.limits))
	for i, p := range sp.limits {
		if p.penalty > 0 {
			u, now, err := sp.lock(ctx, s, p, 0)
			if err != nil {
				return nil, false, err
			}
			left[i] = max(u-now, 0)
			locked = locked || left[i] > 0
		}
	}
	return left, locked, nil
}

// same returns the first limit with the state of limit i (i itself when
// no earlier one has it).
func (sp *split) same(i int) int {
	for j := range i {
		if sp.limits[j].state == sp.limits[i].state {
			return j
		}
	}
	return i
}

// settle turns v, the reply of limit p in a Take of n that was not
// allowed (its call sent cost: charged when positive, at the stamp or with
// the slot mark), into
// what the take script replies: a charge given back and what a peek then
// sees; a lock's time left; a denial's penalty locked when the Take writes.
func (sp *split) settle(ctx context.Context, s *Store, p *prepared, n, cost, left int64, v []int64, mark int64) error {
	switch {
	case left > 0:
		v[3] = left // a peek's integers, and the lock
	case v[0] >= 0:
		if cost == 0 {
			return nil // a peek already
		}
		if cost > 0 {
			if err := sp.giveBack(ctx, s, p, cost, mark); err != nil {
				return err
			}
		}
		w, _, _, err := sp.one(ctx, s, p, 0)
		if err != nil {
			return err
		}
		copy(v, w)
	case p.penalty > 0 && n > 0:
		if _, _, err := sp.lock(ctx, s, p, p.penalty); err != nil {
			return err
		}
	}
	return nil
}

// one runs the take script on limit p's state alone for a cost of c,
// without its penalty (the state key sent as its own lock), stamped, and
// returns the limit's four integers, the slot it took (an InFlight limit)
// and Redis' clock.
func (sp *split) one(ctx context.Context, s *Store, p *prepared, c int64) (v []int64, slot, stamp int64, err error) {
	key := sp.base + p.state
	cmd := append(takeScript.command(2, 4+2+argsPerLimit+1), key, key, chargeArg(c))
	cmd = append(cmd, s.argv(p)[:argsPerLimit-1]...)
	cmd = append(cmd, 0, "s")
	reply, err := s.single(ctx, key, takeScript, cmd)
	if err != nil {
		return nil, 0, 0, err
	}
	if v, err = int64s(reply); err != nil {
		return nil, 0, 0, err
	}
	want := repliesPerLimit + 1 // the figures, [the slot,] the stamp
	if p.alg == store.InFlight {
		want++
	}
	if len(v) != want {
		return nil, 0, 0, fmt.Errorf("redisstore: take: script replied %d integers for one limit, want %d", len(v), want)
	}
	if p.alg == store.InFlight {
		slot = v[want-2]
	}
	return v[:repliesPerLimit], slot, v[want-1], nil
}

// giveBack returns what limit p's charge of c took: its slot (mark) for
// an InFlight limit, else c units charged at the stamp mark.
func (sp *split) giveBack(ctx context.Context, s *Store, p *prepared, c, mark int64) error {
	if p.alg != store.InFlight {
		return sp.refund(ctx, s, p, c, mark)
	}
	return s.release(ctx, sp.base+p.state, mark)
}

// refund gives back c units that limit p's charge at stamp took.
func (sp *split) refund(ctx context.Context, s *Store, p *prepared, c, stamp int64) error {
	key := sp.base + p.state
	cmd := append(refundScript.command(1, 5+1+argsPerLimit), key, chargeArg(c), stamp)
	_, err := s.single(ctx, key, refundScript, append(cmd, s.argv(p)...))
	return err
}

// refundAll gives back n units that a charge of every limit at stamp took
// (Store.Refund), one limit at a time, each state once.
func (sp *split) refundAll(ctx context.Context, s *Store, n, stamp int64) error {
	for i, p := range sp.limits {
		if sp.same(i) == i {
			if err := sp.refund(ctx, s, p, n, stamp); err != nil {
				return err
			}
		}
	}
	return nil
}

// lock reads limit p's penalty lock, setting it for penalty µs when
// penalty > 0 and none holds, and returns until when it holds (0: it does
// not) and Redis' clock.
func (sp *split) lock(ctx context.Context, s *Store, p *prepared, penalty int64) (until, now int64, err error) {
	key := sp.base + p.lock
	reply, err := s.single(ctx, key, lockScript, append(lockScript.command(1, 5), key, penalty))
	if err != nil {
		return 0, 0, err
	}
	v, err := int64s(reply)
	if err == nil && len(v) != 2 {
		err = fmt.Errorf("redisstore: lock: script replied %d integers, want 2", len(v))
	}
	if err != nil {
		return 0, 0, err
	}
	return v[0], v[1], nil
}

// single runs cmd, an EVALSHA of sc on the one Redis key key, through the
// breaker of key's server.
func (s *Store) single(ctx context.Context, key string, sc *script, cmd []any) (any, error) {
	server := s.health.nodeFor(ctx, key)
	if err := server.admit(ctx); err != nil {
		return nil, err
	}
	start := monoMicros()
	reply, server, sent, err := s.send(ctx, server, key, sc, cmd, false)
	server.report(ctx, err, start, sent)
	return reply, err
}
