// Package otellimit records sluice Limiter decisions on OpenTelemetry metric
// instruments: the decisions, store latencies and store errors that
// promlimit exports to Prometheus, with promlimit's labels as attributes.
//
// A Recorder takes its instruments from a metric.MeterProvider and is fed
// by the Limiter's observer hook:
//
//	metrics, err := otellimit.New(otel.GetMeterProvider())
//	...
//	limiter, err := core.New(st, "api", key, limits, core.WithObserver(metrics.Observe))
//
// Its Meter is named "github.com/sluicehq/sluice/otellimit". It creates, with the namespace "sluice"
// unless WithNamespace says otherwise:
//
//	sluice.decisions      {limiter, plan, limit, outcome}  Int64Counter, unit {decision}
//	sluice.store.latency  {limiter}                        Float64Histogram, unit s
//	sluice.store.errors   {limiter, kind}                  Int64Counter, unit {error}
//	sluice.near_limit     {limiter, plan, limit}           Int64Counter, unit {decision} (core.Event.NearLimit)
//
// Through OpenTelemetry's Prometheus exporter with underscore escaping
// (otlptranslator.UnderscoreEscapingWithSuffixes) these read as promlimit's
// sluice_decisions_total, sluice_store_latency_seconds and
// sluice_store_errors_total.
//
// The attributes have promlimit's values. limiter is the Limiter's name
// (the name given to core.New). plan is the request's plan under core.WithPlans
// (core.Event.Plan), and "" when the Limiter's own limits decided. limit
// names the limit that bound the decision (core.Event.Limit) in
// store.ParseLimit's syntax with its defaults spelt out ("10/s gcra burst
// 10"); "none" when no store decided. outcome is core.Outcome.String(),
// except that core.OutcomeFallback is split into fallback_allowed and
// fallback_denied by what the store's local fallback decided. kind is
// timeout, canceled, breaker_open, oom (the error wraps
// store.ErrOutOfMemory) or error; all five series of a limiter exist, at 0,
// from its first decision.
//
// WithStoreStats adds the store's own health: its fleet count, circuit
// breakers, fallback debts and warnings.
//
// The client key is never an attribute: the number of series is bounded by
// the number of limiters, plans, limits and outcomes.
//
// The latency histogram records core.Event.Latency in seconds, for
// decisions that called a store, with promlimit's buckets (50µs to 1s) as
// its explicit bucket boundaries unless WithLatencyBuckets says otherwise
// (a View on the MeterProvider may still change them).
//
// Observe records with the request's context, so an SDK whose exemplar
// filter samples traced requests links measurements to their traces. The
// Redis calls themselves are traced and measured by go-redis's own
// instrumentation (redisotel), on the client given to the Redis store.
package otellimit
