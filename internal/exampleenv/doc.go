// Package exampleenv is what the controls and reload examples share
// besides their own wiring: the -addr and -redis flags, the store -redis
// names, and serving until SIGINT or SIGTERM with a graceful shutdown. The
// framework examples (nethttp, gin, echo) use none of it: each builds its
// store and limiters in its own main.go, for users to copy.
package exampleenv
