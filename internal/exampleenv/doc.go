// Package exampleenv is what the example servers under examples/ share
// besides their routes: the -addr and -redis flags, the store -redis names,
// and serving until SIGINT or SIGTERM with a graceful shutdown. Each
// example's main.go keeps what a user copies: its limiters and how its
// framework attaches them.
package exampleenv
