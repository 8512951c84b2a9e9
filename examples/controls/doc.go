// Command controls shows the controls an API team runs a limit with: plans
// per API key, a status endpoint that charges nothing, and an admin reset.
//
//	GET  /api/items/{id}     limited per API key (X-API-Key): free keys
//	                         100 per minute, pro keys 10,000 per minute,
//	                         unknown keys 10 per minute
//	GET  /rate_limit         the caller's quota, as the next request would
//	                         see it, without spending any (like GitHub's)
//	POST /admin/reset?key=K  clears K's state and any lock-out, everywhere
//	                         (X-Admin-Token required)
//
// Run it:
//
//	go run ./examples/controls [-addr 127.0.0.1:8080] [-admin-token secret] [-redis redis://localhost:6379/0]
//	curl -i -H 'X-API-Key: free-alice' http://127.0.0.1:8080/api/items/1
//	curl -s -H 'X-API-Key: free-alice' http://127.0.0.1:8080/rate_limit
//	curl -i -X POST -H 'X-Admin-Token: secret' 'http://127.0.0.1:8080/admin/reset?key=free-alice'
//
// It keeps state in memory; with -redis (a Redis store, core/redisstore)
// the same code serves any number of instances, and a reset through one
// reaches all.
package main
