// Package promlimit exports sluice Limiter decisions as Prometheus metrics.
//
// A Collector is fed by the Limiter's observer hook and registers itself
// with a prometheus.Registerer:
//
//	metrics, err := promlimit.New(nil) // nil: prometheus.DefaultRegisterer
//	...
//	limiter, err := core.New(store, key, limits,
//		core.WithName("api"), core.WithObserver(metrics.Observe))
//	...
//	metrics.Track(limiter) // optional: readable "limit" label values
//
// It exports, with the namespace "sluice" unless WithNamespace says
// otherwise:
//
//	sluice_decisions_total{limiter, limit, outcome}    counter
//	sluice_store_latency_seconds{limiter}              histogram
//	sluice_store_errors_total{limiter, kind}           counter
//	sluice_breaker_state{limiter}                      gauge
//
// limiter is the Limiter's name (core.WithName). outcome is
// core.Outcome.String(): allowed, denied, delayed, shadow_denied,
// failed_open, failed_closed, fallback, skipped, key_error or canceled. limit names
// the binding limit of the decision (core.Result.Binding): for a Limiter
// passed to Track (or named in WithLimits), the limit in ParseLimit's
// syntax with its defaults spelt out ("10/s gcra burst 10", "1000/3s
// fixed_window"); otherwise its X-RateLimit-Limit figure ("10"); "none"
// when no store decided (skipped, key errors, failed_open, failed_closed).
// The client key is never a label: the number of series is bounded by the
// number of limiters, limits and outcomes.
//
// The latency histogram observes core.Event.Latency, the time spent in
// Store.Take (plus the local store under core.FailLocal), for decisions
// that called a store. kind in store_errors_total is "timeout" (the
// per-decision deadline passed), "canceled" (the request's context ended),
// "breaker_open" (the store was not called because the circuit breaker is
// open) or "error" (any other store error); all four series of a limiter
// exist, at 0, from its first decision. breaker_state is the circuit
// breaker's state after the latest decision: 0 closed, 1 open, 2 half-open
// (core.BreakerState).
//
// Observe is safe for concurrent use and allocation-free once a limiter,
// limit and outcome have been seen: the metric children are cached per
// limiter, so a decision costs a few atomic operations and two small map
// lookups.
package promlimit
