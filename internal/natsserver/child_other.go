//go:build !linux

package natsserver

import "syscall"

// childAttr: without Linux's parent-death signal, the child stops when its
// stdin closes, which the kernel does when the parent dies.
func childAttr() *syscall.SysProcAttr { return nil }
