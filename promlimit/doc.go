// Package promlimit exports sluice Limiter decisions as Prometheus metrics.
//
// A Collector is fed by the Limiter's observer hook and registers itself
// with a prometheus.Registerer:
//
//	metrics, err := promlimit.New(nil) // nil: prometheus.DefaultRegisterer
//	...
//	limiter, err := core.New(st, "api", key, limits, core.WithObserver(metrics.Observe))
//
// It exports, with the namespace "sluice" unless WithNamespace says
// otherwise:
//
//	sluice_decisions_total{limiter, plan, limit, outcome}  counter
//	sluice_store_latency_seconds{limiter}                  histogram
//	sluice_store_errors_total{limiter, kind}               counter
//	sluice_near_limit_total{limiter, plan, limit}          counter (core.Event.NearLimit)
//
// limiter is the Limiter's name (the name given to core.New).
//
// near_limit_total counts the admitted decisions that left a limit less
// than a fifth of its capacity (more than 80% used, Envoy's near_limit),
// its limit label naming that limit; alert on its rate against
// decisions_total before clients get 429s.
//
// plan is the request's plan under core.WithPlans (core.Event.Plan), and
// empty when the Limiter's own limits decided: a Limiter without
// plans, or a request whose plan is "" or unknown. Prometheus reads an
// empty label value as no label, so {plan=""} selects these.
//
// limit names the limit that bound the decision (core.Event.Limit) in
// store.ParseLimit's syntax with its defaults spelt out, so that equal
// limits get equal labels however they were written ("10/s gcra burst 10",
// "1000/3s fixed_window penalty 1m"); "none" when no store
// decided (skipped, key errors under KeyErrorDeny or KeyErrorAllow,
// failed_open, failed_closed, canceled). It follows core.Limiter.SetLimits
// and SetPlans with no help: each decision names the limit it was made
// with.
//
// outcome is core.Outcome.String() (allowed, denied, delayed,
// shadow_denied, failed_open, failed_closed, skipped, key_error, canceled),
// except that core.OutcomeFallback (the store's backend failed and its
// local fallback decided) is split by what the fallback decided:
// fallback_allowed (served, or held under a LeakyBucket) and
// fallback_denied (refused; served anyway in shadow mode).
//
// The client key is never a label: the number of series is bounded by the
// number of limiters, plans, limits and outcomes.
//
// The latency histogram observes core.Event.Latency, the time spent in the
// store's Take or Charge (its fallback included), for decisions that
// called a store; its buckets are 50µs, 100µs, 250µs, 500µs, 1ms, 2.5ms,
// 5ms, 10ms, 25ms, 50ms, 100ms, 250ms and 1s unless WithLatencyBuckets
// says otherwise. kind in store_errors_total classifies core.Event.Err
// (the store's error, or the cause its fallback decided for): "timeout"
// (the store's deadline or a network timeout passed), "canceled" (the request's context ended),
// "breaker_open" (the backend was not called because a circuit breaker is
// open: the error wraps store.ErrBreakerOpen), "oom" (the backend had no
// memory left to write state: store.ErrOutOfMemory) or "error" (any other);
// all five series of a limiter exist, at 0, from its first decision. The
// store's own health (its fleet count, circuit breakers, fallback debts and
// warnings) is exported with WithStoreStats.
//
// Observe is safe for concurrent use and allocation-free once a limiter,
// plan, limit and outcome label have been seen together: the metric
// children are cached per limiter, so a decision costs a few atomic
// operations and two small map lookups.
package promlimit
