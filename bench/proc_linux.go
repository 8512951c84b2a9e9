package main

import "syscall"

// childAttrs makes the kernel SIGKILL the child when this process dies,
// whatever the cause (panic in another goroutine, SIGKILL, crash).
func childAttrs() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
