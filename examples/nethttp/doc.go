// Command nethttp limits a net/http server per route with sluice:
//
//	GET  /api/items/{id}  10 per second and 1000 per hour per client IP
//	POST /login           5 per minute per client IP; a client that goes over
//	                      is locked out for 15 minutes
//	GET  /health          never limited
//
// Run it with the memory store (one process) or with Redis (any number of
// processes share the limits):
//
//	go run ./examples/nethttp [-addr 127.0.0.1:8080] [-redis redis://localhost:6379/0]
//	curl -i http://127.0.0.1:8080/api/items/1
//	curl -i -X POST http://127.0.0.1:8080/login
package main
