package rxstamp_test

import (
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"ragtime/internal/rxstamp"
	"ragtime/internal/rxstamp/rxstamptest"
)

// TestReadReturnsWhenTheBytesArrived: a read 50 ms after the bytes came
// returns the kernel's stamp from before the wait; a read allocates
// nothing; the read keeps the connection's deadline (a net.Error timeout,
// as net/http expects) and its EOF.
func TestReadReturnsWhenTheBytesArrived(t *testing.T) { // not parallel: it counts allocations
	rxstamptest.Need(t)
	client, c := rxstamptest.Dial(t, nil)
	rx := rxstamp.Enable(c)
	rxstamptest.Warm(t, client, rx)
	buf := make([]byte, 64)
	for i := range 3 {
		before := time.Now()
		if _, err := client.Write([]byte("GET / HTTP/1.1\r\n\r\n")); err != nil {
			t.Fatal(err)
		}
		written := time.Now()
		time.Sleep(50 * time.Millisecond) // the reader waits to run
		n, at, err := rx.Read(buf)
		if err != nil || n == 0 {
			t.Fatalf("read %d: %d bytes, %v", i, n, err)
		}
		// The kernel's stamp (at most the write's return, give or take the
		// wall and monotonic clocks' rounding), not the read's.
		if at.Before(before.Add(-time.Millisecond)) || at.After(written.Add(time.Millisecond)) {
			t.Errorf("read %d: stamped %v after the write began, %v after it returned; want between", i, at.Sub(before), at.Sub(written))
		}
	}

	// Every read of a streamed answer comes through here: none allocates.
	msg := []byte("data: x\n\n")
	if allocs := testing.AllocsPerRun(100, func() {
		if _, err := client.Write(msg); err != nil {
			t.Fatal(err)
		}
		if _, _, err := rx.Read(buf); err != nil {
			t.Fatal(err)
		}
	}); allocs != 0 {
		t.Errorf("a stamped read allocates %v times", allocs)
	}

	if err := c.SetReadDeadline(time.Now().Add(30 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := rx.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("a read past the deadline: %v, want a timeout", err)
	} else if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
		t.Errorf("a read past the deadline: %v is not a net.Error timeout", err)
	}
	if err := c.SetReadDeadline(time.Time{}); err != nil {
		t.Fatal(err)
	}
	client.Close()
	if n, _, err := rx.Read(buf); n != 0 || err != io.EOF {
		t.Errorf("a read of a closed connection: %d, %v; want io.EOF", n, err)
	}
}

// TestEnableIsNilWithoutTCP: a connection that is not TCP has no stamps.
func TestEnableIsNilWithoutTCP(t *testing.T) {
	t.Parallel()
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if rxstamp.Enable(a) != nil {
		t.Error("a pipe has receive stamps")
	}
}

// TestAtKeepsTheMonotonicTime: At gives back the time it was given, on the
// monotonic clock; the zero time clears it, and Take clears it too.
func TestAtKeepsTheMonotonicTime(t *testing.T) {
	t.Parallel()
	var at rxstamp.At
	if !at.Load().IsZero() || !at.Take().IsZero() {
		t.Fatal("the zero At holds a time")
	}
	now := time.Now()
	at.Store(now)
	if got := at.Load(); got.Sub(now).Abs() > time.Nanosecond || !strings.Contains(got.String(), "m=") {
		t.Errorf("stored %v, loaded %v (want it, with a monotonic reading)", now, got)
	}
	if got := at.Take(); got.Sub(now).Abs() > time.Nanosecond || !at.Load().IsZero() {
		t.Errorf("took %v, then %v is left; want the time, then none", got, at.Load())
	}
	at.Store(now)
	at.Store(time.Time{})
	if !at.Load().IsZero() {
		t.Error("storing the zero time did not clear it")
	}
}
