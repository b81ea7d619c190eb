//go:build windows

package main

import "syscall"

// setReceiveBuffer sets SO_RCVBUF on a socket before it connects.
func setReceiveBuffer(fd uintptr, n int) {
	_ = syscall.SetsockoptInt(syscall.Handle(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, n)
}
