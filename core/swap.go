package core

import (
	"slices"
	"time"

	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/internal/arith"
)

// limiterConfig is a set of limits in force and what the Limiter derives
// from it. It is never modified once published in Limiter.cfg, so a
// decision sees one consistent set, headers included.
type limiterConfig struct {
	plan    string        // "" for the limits given to New or SetLimits
	limits  []store.Limit // as given to New, SetLimits or SetPlans
	specs   []store.Spec
	headers headerPlan // read by Decision.setHeaders
	// take is what the store is charged: specs, then the guards' specs.
	take   []store.Spec
	guards []guard
	// expires is the earliest guard's end (zero without guards): from
	// then on Decide replaces the config with one without that guard.
	expires time.Time
}

// A guard keeps a limit that SetLimits replaced by a tighter one in force
// while the state built before the swap can matter (its horizon): see
// SetLimits.
type guard struct {
	spec      store.Spec
	successor int // index in limiterConfig.limits of the limit that replaced it
	until     time.Time
}

func (l *Limiter) newConfig(plan string, limits []store.Limit, specs []store.Spec, guards []guard) *limiterConfig {
	c := &limiterConfig{
		plan:    plan,
		limits:  append([]store.Limit(nil), limits...),
		specs:   specs,
		headers: newHeaderPlan(l.style, l.publicPolicyName(plan), specs),
		guards:  guards,
	}
	c.take = c.specs
	if len(guards) > 0 {
		c.take = make([]store.Spec, 0, len(specs)+len(guards))
		c.take = append(c.take, c.specs...)
		for _, g := range guards {
			c.take = append(c.take, g.spec)
			if c.expires.IsZero() || g.until.Before(c.expires) {
				c.expires = g.until
			}
		}
	}
	return c
}

// SetLimits replaces the limits the Limiter enforces, while it serves.
// limits are validated as in New; on error (wrapping ErrInvalidOption and
// store.ErrInvalidLimit) nothing changes. The swap is atomic: each
// decision is made entirely with the old limits or entirely with the new
// ones, headers included (the IETF policies are numbered in the new
// order). SetLimits is safe for concurrent use with Decide and with itself
// (calls are serialized; the last one wins).
//
// Stores key state by a limit's arithmetic (its store.Spec), not its
// position: an unchanged limit keeps its state exactly, however the list
// is reordered or the limit rewritten ("100/m" is "100/m gcra burst 100"),
// and a changed limit starts with fresh state. A limit that replaces
// another (same algorithm and period, and no other limit added or removed
// in the call has them) and is tighter (smaller rate or burst, or longer
// penalty) does not hand every client a fresh allowance: the old limit
// stays in force beside it as a guard until the state built before the
// swap no longer matters (store.Spec.Horizon plus its Penalty, by the
// Limiter's clock). A request must pass both, and the guard's figures are
// folded into the new limit's (the smaller Remaining, the longer
// Retry-After), so headers name only the new limits. A loosened, removed
// or otherwise changed limit takes effect at once, with fresh state.
func (l *Limiter) SetLimits(limits []store.Limit) error {
	specs, err := specsOf(limits)
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cfg.Store(l.newConfig("", limits, specs, guardsFor(l.cfg.Load(), specs, l.now())))
	return nil
}

// guardsFor returns the guards of a swap from old to the limits specs: the
// old limits replaced by tighter ones, and old's guards still in force
// whose successor is unchanged.
func guardsFor(old *limiterConfig, specs []store.Spec, now time.Time) []guard {
	index := make(map[store.Spec]int, len(specs)) // a Spec → its first index in specs (equal Specs share state)
	for i := len(specs) - 1; i >= 0; i-- {
		index[specs[i]] = i
	}
	var gs []guard
	for _, g := range old.guards {
		if !now.Before(g.until) {
			continue
		}
		if _, again := index[g.spec]; again {
			continue // enforced as a limit again: charging it twice would count double
		}
		if j, ok := index[old.specs[g.successor]]; ok {
			g.successor = j
			gs = append(gs, g)
		}
	}
	pairs := replacements(old.specs, specs, index)
	for i, o := range old.specs {
		j, ok := pairs[i]
		if n := specs[j]; ok && (n.Rate() < o.Rate() || n.Burst() < o.Burst() || n.Penalty() > o.Penalty()) {
			gs = append(gs, guard{spec: o, successor: j, until: now.Add(horizon(o))})
		}
	}
	return gs
}

// replacements pairs the limits removed from old with those added in
// specs (index maps each Spec of specs to its first index): an old
// limit i is replaced by the new limit j when they are the only removed
// and the only added limit of their algorithm and period.
func replacements(old, specs []store.Spec, index map[store.Spec]int) map[int]int {
	type class struct {
		alg    store.Algorithm
		period int64
	}
	removed := map[class][]int{}
	oldIDs := make(map[store.Spec]bool, len(old))
	for i, s := range old {
		if _, kept := index[s]; !kept && !oldIDs[s] {
			k := class{s.Algorithm(), s.Period()}
			removed[k] = append(removed[k], i)
		}
		oldIDs[s] = true
	}
	added := map[class][]int{}
	for i, s := range specs {
		if !oldIDs[s] && index[s] == i {
			k := class{s.Algorithm(), s.Period()}
			added[k] = append(added[k], i)
		}
	}
	pairs := map[int]int{}
	for k, rs := range removed {
		if as := added[k]; len(rs) == 1 && len(as) == 1 {
			pairs[rs[0]] = as[0]
		}
	}
	return pairs
}

// horizon returns how long after its last charge a limit's state can still
// refuse a request: the time to refill completely, plus the penalty.
func horizon(s store.Spec) time.Duration {
	return arith.Micros(s.Horizon() + s.Penalty()) // both below 2^53 (Limit.Spec)
}

// dropExpiredGuards replaces the config in force for the plan of cfg by
// one without the guards that have ended by now, and returns the config in
// force for that plan.
func (l *Limiter) dropExpiredGuards(cfg *limiterConfig, now time.Time) *limiterConfig {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.configNamed(cfg.plan)
	if c.plan != cfg.plan {
		return cfg // the plan is gone (SetPlans): finish with what it had
	}
	if c.expires.IsZero() || now.Before(c.expires) {
		return c // another decision, SetLimits or SetPlans got here first
	}
	live := slices.DeleteFunc(slices.Clone(c.guards), func(g guard) bool { return !now.Before(g.until) })
	next := l.newConfig(c.plan, c.limits, c.specs, live)
	l.publish(next)
	return next
}

// fold turns the Result of a Take over cfg.take into one over cfg.limits:
// each guard's result is folded into its successor's (refused if either
// refused, the smaller Remaining, the longer RetryAfter, ResetAfter and
// Delay). Without guards it returns res as is.
func (c *limiterConfig) fold(res store.Result) store.Result {
	if len(c.guards) == 0 || len(res.PerLimit) != len(c.take) {
		return res
	}
	n := len(c.limits)
	own := make([]store.Result, n)
	copy(own, res.PerLimit[:n])
	for i, g := range c.guards {
		gr, s := &res.PerLimit[n+i], &own[g.successor]
		if !gr.Allowed {
			if s.Allowed {
				s.Allowed, s.RetryAfter = false, gr.RetryAfter
			} else {
				s.RetryAfter = max(s.RetryAfter, gr.RetryAfter)
			}
			s.Remaining = 0
		} else {
			s.Remaining = min(s.Remaining, gr.Remaining)
		}
		s.ResetAfter = max(s.ResetAfter, gr.ResetAfter)
		s.Delay = max(s.Delay, gr.Delay)
	}
	out := arith.Combine(own)
	out.Slot = res.Slot
	return out
}
