package natsserver

import "syscall"

// ChildAttr makes the kernel kill the child when its parent dies, kill -9
// included, so that it never outlives orderly holding the store.
func ChildAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
