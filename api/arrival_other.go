//go:build !linux

package api

import (
	"errors"
	"net"
	"syscall"
	"time"
)

// stampListener does nothing here: the kernel's stamps are read on Linux.
func stampListener(net.Listener) {}

// kernelStamps is nil here: without the kernel's receive stamps a
// request's arrival is when its first read returned.
func kernelStamps(net.Conn) syscall.RawConn { return nil }

// readStamped is never called here (kernelStamps gives no raw connection).
func readStamped(syscall.RawConn, []byte) (int, time.Time, error) {
	return 0, time.Time{}, errors.New("api: kernel receive stamps need Linux")
}
