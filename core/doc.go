// Package core is sluice's rate limiter. Start with [New]: it makes a
// [Limiter] from a store, a name, a [KeyFunc] that identifies the client,
// and the limits to enforce (written with package core/store); an adapter
// then applies the Limiter to HTTP requests:
//
//	st := memorystore.New() // one process; redisstore.New(client) for several
//	ip, err := keyfuncs.IP()
//	if err != nil { ... }
//	api, err := core.New(st, "api", ip, []store.Limit{store.PerMinute(100)})
//	if err != nil { ... }
//	http.ListenAndServe(":8080", nethttp.Middleware(api)(mux)) // or ginlimit, echolimit
//
// The package example is complete and runnable.
//
// # For users
//
// New and its options: WithCost, WithSkip, WithCountIf, WithPlans,
// WithFailurePolicy, WithHeaders, WithPolicyNames, WithShadow,
// WithObserver, WithKeyErrorRule, WithRefusal, WithClock. Key functions:
// KeyFunc and ErrNoKey (ready-made ones are in package keyfuncs). In a
// handler, FromContext gives the Decision that bound the request. While
// serving: Limiter.SetLimits, SetPlans, Status (by a request carrying the
// client's key) and Reset (by key). Observation: Event and Outcome, and
// packages promlimit, otellimit and sloglimit.
//
// Deadlines, the circuit breaker and the local fallback while the store is
// away are the store's (package core/redisstore); the failure policy says
// whether the store may decide locally (FailLocal) or the Limiter serves
// (FailOpen) or refuses (FailClosed) instead.
//
// # For adapter authors
//
// An adapter calls [Limiter.Decide] once per request and carries out the
// [Decision]: Decision.Stack (the binding Decision's headers, and the
// request for FromContext), then by Decision.Action serve the handler, wait
// (Decision.Wait) or refuse (Decision.WriteResponse, or Decision.Response
// to write it yourself), and after the handler Decision.Done when
// Decision.NeedsDone. See Limiter.Decide's example and package nethttp,
// the reference adapter.
//
// # For store authors
//
// A store implements store.Store, whose conformance suite is
// core/storetest; a method it cannot serve fails with an error wrapping
// errors.ErrUnsupported.
package core
