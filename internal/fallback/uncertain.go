package fallback

import (
	"context"
	"errors"

	"github.com/sluicehq/sluice/core/store"
)

// Uncertain is the error of a backend call that may have run although its
// reply was lost (a connection lost, or a deadline passed, after it was
// sent). The fallback decides the request locally, as for any failure,
// but owes the backend nothing for it directly: with Settle nil (a call
// the backend cannot identify) the call is taken as having run, so it is
// never charged twice (at worst, a call that never ran goes uncharged);
// otherwise Settle settles it once the backend answers.
type Uncertain struct {
	Err error
	// Settle makes sure that the call never runs if it has not yet, and
	// returns what is still to charge of owe, the units the fallback owes
	// for it (the debt the call carried, and the request when the
	// fallback admitted it): owe when the call did not run or was
	// refused, nothing when it charged (having given back what it charged
	// beyond owe). The rest is then owed as any debt. An error leaves the
	// call to settle later.
	Settle func(ctx context.Context, owe int64) (rest int64, err error)
}

func (u *Uncertain) Error() string { return u.Err.Error() }
func (u *Uncertain) Unwrap() error { return u.Err }

// unsure is a call whose reply was lost, to settle: what the fallback owes
// for it.
type unsure struct {
	settle func(context.Context, int64) (int64, error)
	owe    int64
}

// unsureOf notes what key owes for the call that failed with u (nil: not
// uncertain): owe, the debt it carried and the request if the fallback
// admitted it, is settled through u.Settle once the backend answers; a
// call that cannot be settled is taken as having run, its debt charged.
func (f *Store) unsureOf(key string, limits []store.Spec, u *Uncertain, owe int64) {
	if u == nil || u.Settle == nil {
		return
	}
	sh := f.shard(key)
	sh.mu.Lock()
	r := sh.record(key)
	if r.limits == nil {
		r.limits = limits
	}
	if r.owed == 0 && len(r.unsure) == 0 {
		r.owedSince = f.now()
	}
	r.unsure = append(r.unsure, unsure{u.Settle, owe})
	sh.mu.Unlock()
	f.markOwed()
}

// settleUnsure settles key's calls whose reply was lost; what is left to
// charge is owed as any debt. It reports whether the backend answered.
func (f *Store) settleUnsure(ctx context.Context, key string) bool {
	sh := f.shard(key)
	sh.mu.Lock()
	r := sh.m[key]
	if r == nil || len(r.unsure) == 0 {
		sh.mu.Unlock()
		return true
	}
	todo := r.unsure
	r.unsure = nil
	sh.mu.Unlock()
	for i, u := range todo {
		rest, err := u.settle(ctx, u.owe)
		sh.mu.Lock()
		if err != nil {
			r.unsure = append(r.unsure, todo[i:]...)
			sh.mu.Unlock()
			return false
		}
		if rest > 0 {
			r.owe(rest, f.now())
		}
		sh.mu.Unlock()
	}
	return true
}

// lostConnection reports whether err is a call's connection lost (an
// Uncertain error that is no deadline): the backend answers, a fresh
// connection replaces the lost one, and no outage begins.
func lostConnection(err error) bool {
	var u *Uncertain
	return errors.As(err, &u) && !errors.Is(err, context.DeadlineExceeded)
}
