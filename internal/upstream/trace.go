package upstream

import (
	"crypto/tls"
	"net"
	"net/http/httptrace"
	"sync"
	"sync/atomic"
	"time"

	"ragtime"
)

// Trace collects the httptrace events of one call. Hooks may run on other
// goroutines, even after the request finished, hence the mutex. The zero
// value is ready to use; Client.Do fills it.
type Trace struct {
	// TakeWarm lets the call take a connection Client.Prewarm dialled for
	// it (the model's call; an embedding or a rerank to the same host
	// dials its own, or reuses an idle one).
	TakeWarm bool

	mu                  sync.Mutex
	dnsStart, dnsDone   time.Time
	connStart, connDone time.Time
	tlsStart, tlsDone   time.Time
	gotConn, wrote      time.Time
	firstByte           time.Time            // when the first response byte reached the socket, or was read
	conn                atomic.Pointer[conn] // the call's connection, when it is one of a Pool's (HTTP/1); read without mu, per chunk
	reused              bool
	freshRetry          bool
	prewarm             time.Duration // the prewarmed connection's dial; 0: not prewarmed
}

func (t *Trace) hooks() *httptrace.ClientTrace {
	return &httptrace.ClientTrace{
		DNSStart: func(httptrace.DNSStartInfo) { t.set(&t.dnsStart, false) },
		DNSDone:  func(httptrace.DNSDoneInfo) { t.set(&t.dnsDone, true) },
		ConnectStart: func(string, string) {
			t.set(&t.connStart, false)
		},
		ConnectDone: func(_, _ string, err error) {
			if err == nil {
				t.set(&t.connDone, true)
			}
		},
		TLSHandshakeStart: func() { t.set(&t.tlsStart, false) },
		TLSHandshakeDone: func(_ tls.ConnectionState, err error) {
			if err == nil {
				t.set(&t.tlsDone, true)
			}
		},
		GotConn: func(info httptrace.GotConnInfo) {
			c := poolConn(info.Conn)
			if info.WasIdle {
				c.markBusy()
			}
			t.mu.Lock()
			t.gotConn = time.Now()
			t.reused = info.Reused
			if c != nil && !info.Reused {
				t.prewarm = c.warm.cost
			}
			t.conn.Store(c)
			t.mu.Unlock()
		},
		PutIdleConn: func(err error) {
			if err == nil {
				t.conn.Load().markIdle()
			}
		},
		WroteRequest: func(info httptrace.WroteRequestInfo) {
			if info.Err == nil {
				t.set(&t.wrote, true)
			}
		},
		// The hook runs on the goroutine whose read brought the byte,
		// right after it: the connection's latest stamp is that read's.
		GotFirstResponseByte: func() {
			now := time.Now()
			t.mu.Lock()
			if t.firstByte.IsZero() {
				t.firstByte = now
				if at := t.conn.Load().received(); !at.IsZero() && at.Before(now) && !at.Before(t.wrote) {
					t.firstByte = at
				}
			}
			t.mu.Unlock()
		},
	}
}

// poolConn is the Pool's connection under c, a *conn itself or the one
// under a TLS connection, when c carries one call at a time (HTTP/1): an
// HTTP/2 connection's reads are every stream's frames, so its latest stamp
// says nothing of one call's. nil otherwise.
func poolConn(c net.Conn) *conn {
	if tc, ok := c.(*tls.Conn); ok {
		if tc.ConnectionState().NegotiatedProtocol == "h2" {
			return nil
		}
		c = tc.NetConn()
	}
	pc, _ := c.(*conn)
	return pc
}

// Received is when the bytes of the call's latest read reached its
// connection's socket, by the kernel's stamp: for a streamed answer, the
// chunk just read. The zero time when there is no stamp (another OS, an
// HTTP/2 connection, a transport not a Pool's): the caller then takes the
// read's own time.
func (t *Trace) Received() time.Time {
	return t.conn.Load().received()
}

// set records now in *at: the first time when overwrite is false (a start),
// the latest time otherwise (a done).
func (t *Trace) set(at *time.Time, overwrite bool) {
	now := time.Now()
	t.mu.Lock()
	if overwrite || at.IsZero() {
		*at = now
	}
	t.mu.Unlock()
}

// staleFailure reports whether the call failed the way a keep-alive
// connection the server had already closed fails: reused (or prewarmed,
// dialled before the call), and not one response byte read.
func (t *Trace) staleFailure() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return (t.reused || t.prewarm > 0) && t.firstByte.IsZero()
}

// restart forgets a failed attempt before the next one; fresh marks the
// retry on a fresh connection after a stale one.
func (t *Trace) restart(fresh bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var zero time.Time
	t.dnsStart, t.dnsDone, t.connStart, t.connDone = zero, zero, zero, zero
	t.tlsStart, t.tlsDone, t.gotConn, t.wrote, t.firstByte = zero, zero, zero, zero, zero
	t.conn.Store(nil)
	t.reused, t.freshRetry, t.prewarm = false, fresh, 0
}

// Conn describes the connection the call used.
func (t *Trace) Conn() ragtime.ConnInfo {
	t.mu.Lock()
	defer t.mu.Unlock()
	return ragtime.ConnInfo{
		Reused:     t.reused,
		DNS:        span(t.dnsStart, t.dnsDone),
		Connect:    span(t.connStart, t.connDone),
		TLS:        span(t.tlsStart, t.tlsDone),
		FreshRetry: t.freshRetry,
		Prewarmed:  t.prewarm > 0,
		Prewarm:    t.prewarm,
	}
}

// ServerWait is from the request fully written to the first response byte
// reaching the socket (by the kernel's stamp where there is one, else when
// it was read): the server's time and the network's, without ragtime's
// wait to read it (0 when either did not happen).
func (t *Trace) ServerWait() time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	return span(t.wrote, t.firstByte)
}

// GotConn is when a connection was obtained (zero: none was).
func (t *Trace) GotConn() time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.gotConn
}

// WroteRequest is when the request was fully written (zero: it was not).
func (t *Trace) WroteRequest() time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.wrote
}

func span(start, done time.Time) time.Duration {
	if start.IsZero() || done.IsZero() || done.Before(start) {
		return 0
	}
	return done.Sub(start)
}
