//go:build linux

package api

import (
	"encoding/binary"
	"io"
	"net"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// On Linux an accepted TCP connection asks the kernel to stamp every
// segment it receives (SO_TIMESTAMPING, software receive stamps), and the
// first read of each request is a recvmsg that returns that stamp: the
// request's arrival is then when its first byte reached the socket, not
// when the connection's goroutine got to read it. Under CPU starvation the
// two differ by the goroutine's wait to run, which the accept stage then
// counts instead of leaving it outside ragtime's clock.

// rxStampFlags asks for software receive stamps, reported to the reader.
const rxStampFlags = unix.SOF_TIMESTAMPING_RX_SOFTWARE | unix.SOF_TIMESTAMPING_SOFTWARE

// stampListener turns receive stamps on for a TCP listener. The kernel
// turns stamping on a moment after the first socket asks for it and off
// once none does, so a connection's own option alone would miss the first
// request after an idle spell; the listener's keeps stamping on for as
// long as it listens, and the connections it accepts inherit it.
func stampListener(ln net.Listener) {
	if tl, ok := ln.(*net.TCPListener); ok {
		if raw, err := tl.SyscallConn(); err == nil {
			setStamps(raw)
		}
	}
}

// kernelStamps turns on receive stamps for c and returns its raw
// connection for stamped reads, or nil when c is not a TCP connection or
// the kernel refuses (the first read's own time is the arrival then).
func kernelStamps(c net.Conn) syscall.RawConn {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return nil
	}
	raw, err := tc.SyscallConn()
	if err != nil || !setStamps(raw) {
		return nil
	}
	return raw
}

// setStamps asks for software receive stamps on raw's socket.
func setStamps(raw syscall.RawConn) bool {
	var serr error
	err := raw.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_TIMESTAMPING, rxStampFlags)
	})
	return err == nil && serr == nil
}

// readStamped reads into p with recvmsg, waiting through the runtime's
// poller (so the connection's read deadline holds), and returns the bytes
// read and when the kernel received them (the zero time when it did not
// say).
func readStamped(raw syscall.RawConn, p []byte) (int, time.Time, error) {
	var oob [64]byte // one cmsg of three timespecs: 16 + 3×16 bytes
	var n, oobn int
	var rerr error
	err := raw.Read(func(fd uintptr) bool {
		for {
			n, oobn, _, _, rerr = unix.Recvmsg(int(fd), p, oob[:], 0)
			if rerr != unix.EINTR {
				return rerr != unix.EAGAIN
			}
		}
	})
	now := time.Now()
	if err == nil && rerr != nil {
		err = &net.OpError{Op: "read", Net: "tcp", Err: rerr}
	}
	if err != nil {
		return 0, time.Time{}, err
	}
	if n == 0 && len(p) > 0 {
		return 0, time.Time{}, io.EOF
	}
	return n, receivedAt(oob[:oobn], now), nil
}

// receivedAt reads the kernel's software receive stamp from recvmsg's
// control messages and places it on the monotonic clock by its distance
// from now, read just after. A stamp missing, in the future or over a
// minute old (a wall clock that jumped) gives the zero time.
func receivedAt(oob []byte, now time.Time) time.Time {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return time.Time{}
	}
	for _, m := range msgs {
		if m.Header.Level != unix.SOL_SOCKET || m.Header.Type != unix.SCM_TIMESTAMPING || len(m.Data) < 16 {
			continue
		}
		sec := int64(binary.NativeEndian.Uint64(m.Data[0:8]))
		nsec := int64(binary.NativeEndian.Uint64(m.Data[8:16]))
		if sec == 0 && nsec == 0 {
			return time.Time{}
		}
		lag := now.Sub(time.Unix(sec, nsec)) // wall clock against wall clock
		if lag < 0 || lag > time.Minute {
			return time.Time{}
		}
		return now.Add(-lag) // keeps now's monotonic reading
	}
	return time.Time{}
}
