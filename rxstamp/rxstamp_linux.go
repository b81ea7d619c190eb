//go:build linux

package rxstamp

import (
	"encoding/binary"
	"io"
	"net"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// flags asks for software receive stamps, reported to the reader.
const flags = unix.SOF_TIMESTAMPING_RX_SOFTWARE | unix.SOF_TIMESTAMPING_SOFTWARE

// Listen turns receive stamps on for a TCP listener (nothing for another
// kind): the connections it accepts inherit them, and the kernel keeps
// stamping for as long as it listens.
func Listen(ln net.Listener) {
	if tl, ok := ln.(*net.TCPListener); ok {
		if raw, err := tl.SyscallConn(); err == nil {
			set(raw)
		}
	}
}

// Enable turns receive stamps on for c and returns its raw connection for
// Read, or nil when c is not a TCP connection or the kernel refuses.
func Enable(c net.Conn) syscall.RawConn {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return nil
	}
	raw, err := tc.SyscallConn()
	if err != nil || !set(raw) {
		return nil
	}
	return raw
}

// set asks for software receive stamps on raw's socket.
func set(raw syscall.RawConn) bool {
	var serr error
	err := raw.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_TIMESTAMPING, flags)
	})
	return err == nil && serr == nil
}

// Read reads into p with recvmsg, waiting through the runtime's poller (so
// the connection's read deadline holds, and a timeout is a net.Error whose
// Timeout is true), and returns the bytes read and when the kernel received
// the last of them: on the monotonic clock, or the zero time when the
// kernel did not say. A closed peer is io.EOF, as from net.Conn.
func Read(raw syscall.RawConn, p []byte) (int, time.Time, error) {
	var oob [64]byte // one control message of three timespecs: 16 + 3×16 bytes
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
