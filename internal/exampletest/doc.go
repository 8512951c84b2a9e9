// Package exampletest holds what the tests of the example servers share:
// the check of the routes that examples/nethttp, examples/gin and
// examples/echo all serve, the check that an example imports nothing
// internal, and a log buffer safe for concurrent use.
package exampletest
