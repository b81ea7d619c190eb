//go:build !linux

package rxstamp

import (
	"errors"
	"net"
	"syscall"
	"time"
)

// Listen does nothing here: receive stamps are read on Linux.
func Listen(net.Listener) {}

// Enable is nil here: without the kernel's receive stamps callers take a
// read's own time.
func Enable(net.Conn) syscall.RawConn { return nil }

// Read is never called here (Enable gives no raw connection).
func Read(syscall.RawConn, []byte) (int, time.Time, error) {
	return 0, time.Time{}, errors.New("rxstamp: kernel receive stamps need Linux")
}
