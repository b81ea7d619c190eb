//go:build !linux

package rxstamp

import (
	"net"
	"time"
)

// Listen does nothing here: receive stamps are read on Linux.
func Listen(net.Listener) {}

// Enable is nil here: without the kernel's receive stamps callers take a
// read's own time.
func Enable(net.Conn) *Reader { return nil }

// Reader is never made here (Enable gives none).
type Reader struct{}

// Read reads nothing: there is no Reader here to call it on.
func (*Reader) Read([]byte) (int, time.Time, error) { return 0, time.Time{}, net.ErrClosed }
