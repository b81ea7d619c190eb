package api

import (
	"net"
	"testing"
	"time"

	"ragtime/internal/rxstamp"
	"ragtime/internal/rxstamp/rxstamptest"
)

// TestArrivalIsWhenTheRequestReachedTheSocket: on Linux a request's
// arrival is the kernel's stamp of its first byte, not the time its read
// returned: a read 50 ms after the bytes came gets a stamp from before the
// wait, for the connection's first request and for the next one on it.
func TestArrivalIsWhenTheRequestReachedTheSocket(t *testing.T) {
	t.Parallel()
	rxstamptest.Need(t)
	client, c := rxstamptest.Dial(t, func(ln net.Listener) net.Listener { return newArrivalListener(ln) })
	ac := c.(*arrivalConn)
	rxstamptest.Warm(t, client, ac.rx)
	buf := make([]byte, 64)
	for i, req := range []string{"GET /ask?q=one HTTP/1.1\r\n\r\n", "GET /ask?q=two HTTP/1.1\r\n\r\n"} {
		ac.armed.Store(true) // as the handler's end re-arms it
		before := time.Now()
		if _, err := client.Write([]byte(req)); err != nil {
			t.Fatal(err)
		}
		written := time.Now()
		time.Sleep(50 * time.Millisecond) // the connection's goroutine waits to run
		readAt := time.Now()
		n, err := c.Read(buf)
		if err != nil || string(buf[:n]) != req {
			t.Fatalf("request %d: read %q, %v; want %q", i, buf[:n], err, req)
		}
		at, ok := ac.take()
		if !ok {
			t.Fatalf("request %d: no arrival", i)
		}
		// The stamp is the kernel's (at most the write's return, plus the
		// wall clock's and the monotonic clock's rounding), not the read's.
		if at.Before(before.Add(-time.Millisecond)) || at.After(written.Add(time.Millisecond)) {
			t.Errorf("request %d arrived at %v after the write began, %v after it returned; want between (the read began %v after)",
				i, at.Sub(before), at.Sub(written), readAt.Sub(before))
		}
		if _, ok := ac.take(); ok {
			t.Errorf("request %d: a second take found an arrival", i)
		}
		// Further reads of the same request are not stamped.
		if _, err := client.Write([]byte("body")); err != nil {
			t.Fatal(err)
		}
		if n, err := c.Read(buf); err != nil || string(buf[:n]) != "body" {
			t.Fatalf("request %d's body: %q, %v", i, buf[:n], err)
		}
		if _, ok := ac.take(); ok {
			t.Errorf("request %d: a read after the first stamped the arrival again", i)
		}
	}

}

// TestArrivalWithoutKernelStamps: a connection that is not TCP (or a
// kernel without stamps) stamps the arrival when its first read returns.
func TestArrivalWithoutKernelStamps(t *testing.T) {
	t.Parallel()
	server, client := net.Pipe()
	defer server.Close()
	defer client.Close()
	ac := &arrivalConn{Conn: server, rx: rxstamp.Enable(server)}
	if ac.rx != nil {
		t.Fatal("a pipe has kernel receive stamps")
	}
	ac.armed.Store(true)
	go client.Write([]byte("GET / HTTP/1.1\r\n\r\n"))
	before := time.Now()
	buf := make([]byte, 64)
	if _, err := ac.Read(buf); err != nil {
		t.Fatal(err)
	}
	at, ok := ac.take()
	if !ok || at.Before(before) || at.After(time.Now()) {
		t.Errorf("arrival %v (ok %v), want the read's own time", at.Sub(before), ok)
	}
}
