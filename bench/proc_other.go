//go:build !linux

package main

import "syscall"

// childAttrs has no parent-death signal outside Linux: the server is killed
// by the deferred cleanup and the signal handler only.
func childAttrs() *syscall.SysProcAttr { return nil }
