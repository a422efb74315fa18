package natsserver

import "syscall"

// childAttr makes the kernel kill the child when its parent dies, kill -9
// included, so that it never outlives orderly holding the store. Only
// StartTied may use it.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
