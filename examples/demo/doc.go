// Command demo serves one rate-limited route with sluice, configured by
// flags: a way to try the library from a shell, and the server that the
// distributed, fault and load tests start several times.
//
//	go run ./examples/demo [flags]
//
// GET / is limited and answers 200 "ok"; GET /healthz and GET /metrics are
// never limited. The demo prints "listening on http://ADDR" on stdout once
// it accepts connections (with -addr 127.0.0.1:0, ADDR holds the port the
// system chose), logs what it serves to stderr, and shuts down gracefully on
// SIGINT or SIGTERM (exit status 0). A bad flag exits with status 2 and a
// message saying what is wrong; other failures (say, the port is taken)
// exit with status 1.
//
// The flags (-h describes each):
//
//	-addr 127.0.0.1:8080   -framework nethttp|gin|echo (default nethttp)   -name demo
//	-redis URL (redis://host:port/db; empty: in-memory store)   -cluster host:port,...
//	-failure local|open|closed (default local)   -timeout 100ms (per Redis call)
//	-algorithm gcra|token_bucket|fixed_window|sliding_window|sliding_log|leaky_bucket
//	-rate 10  -period 1s  -burst 0 (0: the algorithm's default)  -penalty 0
//	-limit "10/s burst 20" (store.ParseLimit; instead of the five flags above)
//	-key ip|header:NAME|jwt|route (default ip)   -jwt-secret S (HS256, for -key jwt)
//	-trusted-proxies CIDR,...   -headers legacy|ietf|both (default legacy)
//
// -key jwt keys a request by the "sub" claim of its verified bearer token,
// and a request without a valid token by its address. Several demos given
// the same -redis (or -cluster), -name and limit share one allowance per
// client: that is how the distributed tests run them.
package main
