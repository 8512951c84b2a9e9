// Package core is sluice's rate limiter for users and HTTP adapters: New
// makes a Limiter from a store, a KeyFunc and Limits (PerSecond,
// PerMinute, PerHour, ParseLimit), and the adapters (nethttp, ginlimit,
// echolimit) call Limiter.Decide once per request and carry out its
// Decision.
//
// A Limiter needs a store: memorystore.New() for one process, or
// redisstore.New for several sharing Redis. Limit, Algorithm and Result
// are aliases of package store's, so users import only core and a store;
// package store is the contract for those who write a store. Key
// functions live in keyfuncs.
package core
