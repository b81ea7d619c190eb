package api

import (
	"context"
	"net"
	"sync/atomic"
	"time"

	"ragtime/internal/rxstamp"
	"ragtime/pipeline"
)

// A request's arrival is when its first byte reached the connection, before
// the server read it, parsed it, routed it and started the handler: under
// load that wait is part of what the client sees as TTFT, so the pipeline's
// clock starts there (the accept stage), not at the handler. Where the
// kernel stamps received segments (package rxstamp) the arrival is the
// stamp of the request's first read; elsewhere it is when that read
// returned.

// arrivalListener wraps each accepted connection in an arrivalConn.
type arrivalListener struct{ net.Listener }

// newArrivalListener wraps ln, with the kernel's receive stamps turned on
// for it where it stamps (rxstamp.Listen).
func newArrivalListener(ln net.Listener) arrivalListener {
	rxstamp.Listen(ln)
	return arrivalListener{ln}
}

func (l arrivalListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	ac := &arrivalConn{Conn: c, rx: rxstamp.Enable(c)}
	ac.armed.Store(true)
	return ac, nil
}

// arrivalConn stamps the first read of each request: armed from the
// connection's start and again after each handler returns, disarmed by the
// first read that returns bytes.
type arrivalConn struct {
	net.Conn
	rx    *rxstamp.Reader // for the armed reads, stamped by the kernel; nil: not stamped
	armed atomic.Bool
	at    rxstamp.At // the current request's arrival; zero: none
}

func (c *arrivalConn) Read(p []byte) (int, error) {
	if !c.armed.Load() {
		return c.Conn.Read(p)
	}
	var n int
	var at time.Time
	var err error
	if c.rx != nil {
		n, at, err = c.rx.Read(p)
	} else {
		n, err = c.Conn.Read(p)
	}
	if n > 0 && c.armed.CompareAndSwap(true, false) {
		if at.IsZero() {
			at = time.Now()
		}
		c.at.Store(at)
	}
	return n, err
}

// take returns the current request's arrival and forgets it.
func (c *arrivalConn) take() (time.Time, bool) {
	at := c.at.Take()
	return at, !at.IsZero()
}

type connKey struct{}

// connContext puts the arrivalConn in every request's context
// (http.Server.ConnContext).
func connContext(ctx context.Context, c net.Conn) context.Context {
	if ac, ok := c.(*arrivalConn); ok {
		return context.WithValue(ctx, connKey{}, ac)
	}
	return ctx
}

// arrival hands a request its arrival through ctx (pipeline.WithArrival)
// and returns the connection to re-arm for the next request once the
// handler is done (nil for a connection Serve did not accept).
func arrival(ctx context.Context) (context.Context, *arrivalConn) {
	ac, _ := ctx.Value(connKey{}).(*arrivalConn)
	if ac == nil {
		return ctx, nil
	}
	if at, ok := ac.take(); ok {
		ctx = pipeline.WithArrival(ctx, at)
	}
	return ctx, ac
}
