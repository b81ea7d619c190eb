// Package rxstamptest sets up loopback TCP connections with the kernel's
// receive stamps on, for the tests of what reads them.
package rxstamptest

import (
	"net"
	"runtime"
	"testing"
	"time"

	"ragtime/internal/rxstamp"
)

// Need skips t where receive stamps are not read (off Linux).
func Need(t testing.TB) {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("kernel receive stamps are read on Linux only")
	}
}

// Dial returns the two ends of a loopback TCP connection, the client's and
// the one accept returned from a stamping listener (rxstamp.Listen) that
// wrap, when not nil, wraps first; all are closed when t ends.
func Dial(t testing.TB, wrap func(net.Listener) net.Listener) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	rxstamp.Listen(ln)
	accept := ln
	if wrap != nil {
		accept = wrap(ln)
	}
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	server, err = accept.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { server.Close() })
	return client, server
}

// Warm writes to client and reads with rx until a read is stamped: the
// kernel turns stamping on a moment after the first socket asks (a
// deferred switch). It fails t after a second without a stamp.
func Warm(t testing.TB, client net.Conn, rx *rxstamp.Reader) {
	t.Helper()
	if rx == nil {
		t.Fatal("the connection has no receive stamps")
	}
	buf := make([]byte, 16)
	for try := 0; try <= 100; try++ {
		if _, err := client.Write([]byte("warm")); err != nil {
			t.Fatal(err)
		}
		n, at, err := rx.Read(buf)
		if err != nil || string(buf[:n]) != "warm" {
			t.Fatalf("warming up: %q, %v", buf[:n], err)
		}
		if !at.IsZero() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("the kernel stamped no read in a second")
}
