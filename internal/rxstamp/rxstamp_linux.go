//go:build linux

package rxstamp

import (
	"encoding/binary"
	"io"
	"net"
	"strconv"
	"syscall"
	"time"
	"unsafe"

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

// Enable turns receive stamps on for c and returns a Reader of it, or nil
// when c is not a TCP connection or the kernel refuses.
func Enable(c net.Conn) *Reader {
	tc, ok := c.(*net.TCPConn)
	if !ok || unix.SizeofCmsghdr != 16 || strconv.IntSize != 64 { // receivedAt reads the 64-bit layout
		return nil
	}
	raw, err := tc.SyscallConn()
	if err != nil || !set(raw) {
		return nil
	}
	r := &Reader{raw: raw}
	r.recv = r.recvmsg // bound once: a closure per read would be allocated per read
	return r
}

// set asks for software receive stamps on raw's socket.
func set(raw syscall.RawConn) bool {
	var serr error
	err := raw.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_TIMESTAMPING, flags)
	})
	return err == nil && serr == nil
}

// Reader reads a connection with its receive stamps. One read at a time,
// as a net.Conn is read; it allocates nothing per read.
type Reader struct {
	raw  syscall.RawConn
	recv func(fd uintptr) bool
	// one read's buffers and results, for recv
	p       []byte
	msg     unix.Msghdr
	iov     unix.Iovec
	oob     [64]byte // one control message of three timespecs: 16 + 3×16 bytes
	n, oobn int
	err     error
}

// recvmsg is one attempt at the read, for raw.Read: false to wait until
// the socket is readable. It calls recvmsg(2) itself, with the message
// header in the Reader, because unix.Recvmsg allocates the peer's address
// on every call, and this runs on every read of a streamed answer.
func (r *Reader) recvmsg(fd uintptr) bool {
	r.iov.Base = nil
	if len(r.p) > 0 {
		r.iov.Base = &r.p[0]
	}
	r.iov.SetLen(len(r.p))
	r.msg = unix.Msghdr{Iov: &r.iov, Control: &r.oob[0]}
	r.msg.SetIovlen(1)
	r.msg.SetControllen(len(r.oob))
	for {
		n, _, errno := unix.Syscall(unix.SYS_RECVMSG, fd, uintptr(unsafe.Pointer(&r.msg)), 0)
		switch errno {
		case 0:
			r.n, r.oobn, r.err = int(n), int(r.msg.Controllen), nil
			return true
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			return false
		default:
			r.n, r.oobn, r.err = 0, 0, errno
			return true
		}
	}
}

// Read reads into p with recvmsg, waiting through the runtime's poller (so
// the connection's read deadline holds, and a timeout is a net.Error whose
// Timeout is true), and returns the bytes read and when the kernel received
// the last of them: on the monotonic clock, or the zero time when the
// kernel did not say. A closed peer is io.EOF, as from net.Conn.
func (r *Reader) Read(p []byte) (int, time.Time, error) {
	r.p = p
	err := r.raw.Read(r.recv)
	r.p = nil
	now := time.Now()
	if err == nil && r.err != nil {
		err = &net.OpError{Op: "read", Net: "tcp", Err: r.err}
	}
	if err != nil {
		return 0, time.Time{}, err
	}
	if r.n == 0 && len(p) > 0 {
		return 0, time.Time{}, io.EOF
	}
	return r.n, receivedAt(r.oob[:r.oobn], now), nil
}

// receivedAt reads the kernel's software receive stamp from recvmsg's
// control messages and places it on the monotonic clock by its distance
// from now, read just after. A stamp missing, in the future or over a
// minute old (a wall clock that jumped) gives the zero time. It parses the
// 64-bit layout (Enable refuses elsewhere) by hand, as
// unix.ParseSocketControlMessage allocates, and this runs on every read of
// a streamed answer.
func receivedAt(oob []byte, now time.Time) time.Time {
	const hdr = unix.SizeofCmsghdr // 16: Len uint64, Level int32, Type int32
	for len(oob) >= hdr {
		n := int(binary.NativeEndian.Uint64(oob[0:8]))
		level := int32(binary.NativeEndian.Uint32(oob[8:12]))
		typ := int32(binary.NativeEndian.Uint32(oob[12:16]))
		if n < hdr || n > len(oob) {
			return time.Time{}
		}
		if level == unix.SOL_SOCKET && typ == unix.SCM_TIMESTAMPING && n >= hdr+16 {
			sec := int64(binary.NativeEndian.Uint64(oob[hdr : hdr+8]))
			nsec := int64(binary.NativeEndian.Uint64(oob[hdr+8 : hdr+16]))
			if sec == 0 && nsec == 0 {
				return time.Time{}
			}
			lag := now.Sub(time.Unix(sec, nsec)) // wall clock against wall clock
			if lag < 0 || lag > time.Minute {
				return time.Time{}
			}
			return now.Add(-lag) // keeps now's monotonic reading
		}
		n = (n + 7) &^ 7 // the next message starts aligned to 8
		if n >= len(oob) {
			break
		}
		oob = oob[n:]
	}
	return time.Time{}
}
