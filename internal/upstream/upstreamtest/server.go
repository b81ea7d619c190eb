// Package upstreamtest holds test servers for the upstream layer's edge
// cases, shared by the tests of every package that calls upstream.
package upstreamtest

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
)

// ClosingServer is a real HTTP/1.1 server that closes each connection after
// the first answer on it, the way llama-server does after a stream, without
// a `Connection: close` header: a client that reuses the connection sends
// its next request into a socket the server has closed. To hit that window
// every time (instead of racing the FIN), the server reads the next request
// on the connection and then closes it unanswered.
type ClosingServer struct {
	// URL is the server's root, http://127.0.0.1:port.
	URL string
	// Answered counts requests that reached the handler; Dropped counts
	// requests read on a used connection and closed unanswered; Conns
	// counts accepted connections.
	Answered, Dropped, Conns atomic.Int64
}

type connKey struct{}

// StartClosing starts a ClosingServer answering with h; it stops when the
// test ends.
func StartClosing(t testing.TB, h http.Handler) *ClosingServer {
	t.Helper()
	s := &ClosingServer{}
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Context().Value(connKey{}).(*atomic.Int64).Add(1) > 1 {
			s.Dropped.Add(1)
			if c, _, err := w.(http.Hijacker).Hijack(); err == nil {
				c.Close()
			}
			return
		}
		s.Answered.Add(1)
		h.ServeHTTP(w, r)
	}))
	ts.Config.ConnContext = func(ctx context.Context, _ net.Conn) context.Context {
		s.Conns.Add(1)
		return context.WithValue(ctx, connKey{}, new(atomic.Int64))
	}
	ts.Start()
	t.Cleanup(ts.Close)
	s.URL = ts.URL
	return s
}
