package llm

import (
	"crypto/tls"
	"net/http/httptrace"
	"sync"
	"time"

	"ragtime/pipeline"
)

// connTrace collects the httptrace events of one request. Hooks may run on
// other goroutines, even after the request finished, hence the mutex.
type connTrace struct {
	mu                  sync.Mutex
	dnsStart, dnsDone   time.Time
	connStart, connDone time.Time
	tlsStart, tlsDone   time.Time
	gotConn, wrote      time.Time
	reused              bool
}

func (t *connTrace) hooks() *httptrace.ClientTrace {
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
			t.mu.Lock()
			t.gotConn = time.Now()
			t.reused = info.Reused
			t.mu.Unlock()
		},
		WroteRequest: func(info httptrace.WroteRequestInfo) {
			if info.Err == nil {
				t.set(&t.wrote, true)
			}
		},
	}
}

// set records now in *at: the first time when overwrite is false (a start),
// the latest time otherwise (a done).
func (t *connTrace) set(at *time.Time, overwrite bool) {
	now := time.Now()
	t.mu.Lock()
	if overwrite || at.IsZero() {
		*at = now
	}
	t.mu.Unlock()
}

// fill copies what was traced into gen.
func (t *connTrace) fill(gen *pipeline.Generation) {
	t.mu.Lock()
	defer t.mu.Unlock()
	gen.GotConn = t.gotConn
	gen.WroteRequest = t.wrote
	gen.Conn = pipeline.ConnInfo{
		Reused:  t.reused,
		DNS:     span(t.dnsStart, t.dnsDone),
		Connect: span(t.connStart, t.connDone),
		TLS:     span(t.tlsStart, t.tlsDone),
	}
}

func span(start, done time.Time) time.Duration {
	if start.IsZero() || done.IsZero() || done.Before(start) {
		return 0
	}
	return done.Sub(start)
}
