// Package core is sluice's rate limiter. Start with [New]: it makes a
// [Limiter] from a store, a [KeyFunc] that identifies the client, and the
// limits ([Limit]) to enforce; an adapter then applies the Limiter to HTTP requests:
//
//	st := memorystore.New() // one process; redisstore.New(client) for several
//	ip, err := keyfuncs.IP()
//	if err != nil { ... }
//	api, err := core.New(st, "api", ip, []store.Limit{store.PerMinute(100)})
//	if err != nil { ... }
//	http.ListenAndServe(":8080", nethttp.Middleware(api)(mux)) // or ginlimit, echolimit
//
// The package example is complete and runnable. The API falls in three
// parts.
//
// # For users
//
// New and its options (WithCost, WithCostFunc,
// WithSkip, WithPlans, WithFailurePolicy, WithFallbackStore, WithTimeout,
// WithHeaders, WithPolicyName, WithPlanPolicyNames, WithShadow,
// WithObserver, WithKeyErrorRule, WithKeyErrorKey, the With...Response
// options, WithClock); limits (Limit, PerSecond, PerMinute, PerHour, ParseLimit, and
// the Algorithm constants); key functions (KeyFunc, ErrNoKey; ready-made
// ones are in package keyfuncs); in a handler, FromContext (the Decision
// that bound the request); controls while serving (Limiter.SetLimits,
// SetPlans, Status, StatusOf, Reset, ResetRequest, Result.ResetAt);
// observation (Event, Outcome, LogDenials, and packages promlimit and
// otellimit for metrics).
//
// # For adapter authors
//
// An adapter calls [Limiter.Decide] once per request and carries out the
// [Decision]: Decision.Stack (the binding Decision's headers, and the
// request for FromContext; Decision.SetHeaders where one Limiter is all),
// then by Decision.Action serve the handler,
// wait (Decision.Wait) or refuse (Decision.WriteResponse or
// Decision.Response). Action, Response, RetryAfterSeconds and the Header
// constants serve those who write the response themselves; see
// Limiter.Decide's example and package nethttp, the reference adapter.
//
// # For store authors
//
// A store implements [store.Store], and [store.Peeker] and [store.Resetter] for
// Status and Reset, in package core/store, whose conformance suite is
// core/storetest. Limit, Algorithm and Result are aliases of package
// store's, so users import only core and a store: memorystore.New() for
// one process, redisstore.New for several sharing Redis.
package core
