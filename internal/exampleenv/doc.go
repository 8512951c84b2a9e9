// Package exampleenv is what the example servers under examples/ share
// besides their framework's wiring: the -addr and -redis flags, the store
// -redis names, the limiters of the nethttp, gin and echo examples' routes,
// and serving until SIGINT or SIGTERM with a graceful shutdown (Run does
// all of it for the framework examples). Each example's main.go keeps what
// differs between frameworks: how the limiters are attached to the routes.
package exampleenv
