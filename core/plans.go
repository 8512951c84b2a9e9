package core

import (
	"cmp"
	"fmt"
	"maps"
	"net/http"
	"slices"

	"github.com/sluicehq/sluice/core/store"
)

// planConfigs holds the config of each plan by name. It is never modified
// once published in Limiter.plans.
type planConfigs map[string]*limiterConfig

// WithPlans gives requests limits by plan: plan names a request's plan
// (say, from its API key's record: "free", "pro"), and plans holds the
// limits of each plan; a request whose plan is "" or not in plans gets
// the limits given to New. plan is called once per decision, after the key
// function; it must be safe for concurrent use and fast (look the plan up
// in memory, not in a database per request). Plan names must be 1 to 128
// printable ASCII characters; New validates every plan's limits (an error
// names the plan and the limit's index). SetPlans replaces the plans while
// the Limiter serves.
//
// A plan is enforced like the Limiter's own limits: the headers describe
// its limits (IETF policies named by WithPolicyNames, never by the plan's
// name), and observers see it in Event.Plan. State is kept per client and
// per limit whatever the plan: a client that changes plan keeps the state
// of the limits both plans share (same algorithm, rate, period, burst and
// penalty) and starts afresh on the others, so an upgrade from "100/m" to
// "10000/m" takes effect at once; give both plans a common limit when
// usage must carry over.
func WithPlans(plan func(r *http.Request) string, plans map[string][]store.Limit) Option {
	return optionFunc(func(o *options) error {
		if plan == nil {
			return fmt.Errorf("%w: WithPlans: plan function is nil", ErrInvalidOption)
		}
		if _, err := planSpecs(plans); err != nil {
			return err
		}
		o.l.planOf, o.plans = plan, plans
		return nil
	})
}

// planSpecs validates plans.
func planSpecs(plans map[string][]store.Limit) (map[string][]store.Spec, error) {
	if len(plans) == 0 {
		return nil, fmt.Errorf("%w: no plans", ErrInvalidOption)
	}
	out := make(map[string][]store.Spec, len(plans))
	for name, limits := range plans {
		if err := checkName("plan", name); err != nil {
			return nil, err
		}
		specs, err := specsOf(limits)
		if err != nil {
			return nil, fmt.Errorf("plan %q: %w", name, err)
		}
		out[name] = specs
	}
	return out, nil
}

// SetPlans replaces the plans of a Limiter made with WithPlans while it
// serves, with the guarantees of SetLimits plan by plan: on error nothing
// changes; each decision is made entirely with the old plans or entirely
// with the new ones; within a plan kept, unchanged limits keep their state
// and a limit replaced by a tighter one stays in force as a guard. A
// removed plan sends its requests to the Limiter's own limits; an added
// one starts afresh. The Limiter's own limits are not affected.
func (l *Limiter) SetPlans(plans map[string][]store.Limit) error {
	if l.planOf == nil {
		return fmt.Errorf("%w: SetPlans on a Limiter made without WithPlans", ErrInvalidOption)
	}
	specs, err := planSpecs(plans)
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	old := l.plans.Load()
	now := l.now()
	next := make(planConfigs, len(plans))
	for name, limits := range plans {
		var guards []guard
		if old != nil && (*old)[name] != nil {
			guards = guardsFor((*old)[name], specs[name], now)
		}
		next[name] = l.newConfig(name, limits, specs[name], guards)
	}
	l.plans.Store(&next)
	return nil
}

// configFor returns the config in force for r's plan.
func (l *Limiter) configFor(r *http.Request) *limiterConfig {
	if l.planOf == nil {
		return l.cfg.Load()
	}
	return l.configNamed(l.planOf(r))
}

// configNamed returns the config in force for the plan named plan: the
// Limiter's own for "" or an unknown plan.
func (l *Limiter) configNamed(plan string) *limiterConfig {
	if ps := l.plans.Load(); ps != nil && plan != "" {
		if c := (*ps)[plan]; c != nil {
			return c
		}
	}
	return l.cfg.Load()
}

// publish puts c in force for its plan. The caller holds l.mu.
func (l *Limiter) publish(c *limiterConfig) {
	if c.plan == "" {
		l.cfg.Store(c)
		return
	}
	next := maps.Clone(*l.plans.Load())
	next[c.plan] = c
	l.plans.Store(&next)
}

// allLimits returns every limit that holds state for the Limiter's
// clients: its own, every plan's and every guard's, each once.
func (l *Limiter) allLimits() []store.Spec {
	cfgs := []*limiterConfig{l.cfg.Load()}
	if ps := l.plans.Load(); ps != nil {
		for _, name := range slices.Sorted(maps.Keys(*ps)) {
			cfgs = append(cfgs, (*ps)[name])
		}
	}
	seen := map[store.Spec]bool{}
	var out []store.Spec
	for _, c := range cfgs {
		for _, sp := range c.take {
			if !seen[sp] {
				seen[sp] = true
				out = append(out, sp)
			}
		}
	}
	return out
}

// publicPolicyName is the IETF policy name of the limits of plan ("": the
// Limiter's own limits): never the Limiter's or the plan's name.
func (l *Limiter) publicPolicyName(plan string) string {
	return cmp.Or(l.policyNames[plan], l.policyNames[""], "default")
}
