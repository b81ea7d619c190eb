package api

// An /ask stream's connection: its headers, the writes under a deadline,
// a client leaving, the heartbeat and the stream's end.

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/labstack/echo/v4"

	"ragtime/pipeline"
)

var (
	headerEventStream = []string{"text/event-stream; charset=utf-8"}
	headerNoCache     = []string{"no-cache"}
	headerNo          = []string{"no"}
)

// sink is one connection receiving a stream.
type sink struct {
	conn streamConn
	done chan struct{} // closed when it receives no more events
	err  error         // the write error that detached it, if any
}

// release readies the connection for what the server writes after the
// handler (see streamConn.release), unless a write on it failed.
func (s *sink) release() {
	if s.err == nil {
		s.conn.release()
	}
}

// attachLocked makes w the stream's connection: headers, then the retry
// hint (sent with the first event's flush). No "Connection: keep-alive":
// HTTP/1.1 keeps the connection without it and HTTP/2 forbids it, and
// with it a stream's response had nine headers, one past what a Go map
// holds in its first group: the header map and the copy net/http takes of
// it grew to tables (0.6 KB more per open stream in make bench-streams,
// measured when the values were still set one by one).
//
// The status goes through resp, echo's response (which the access log
// reads); the events go to the net/http writer under it, which lives as
// long as the request, where resp is reused by the router once its
// handler has returned and the stream goes on as the request's tail
// (streamHub.run).
func (l *eventLog) attachLocked(resp *echo.Response) *sink {
	sk := &sink{conn: l.hub.startStream(resp), done: make(chan struct{})}
	l.sink = sk
	return sk
}

// startStream sends a stream's headers and its retry hint, which go out
// with the first flush, and returns the connection.
func (h *streamHub) startStream(resp *echo.Response) streamConn {
	hd := resp.Header()
	hd["Content-Type"] = headerEventStream // shared values, as securityHeaders'
	hd["Cache-Control"] = headerNoCache
	hd["X-Accel-Buffering"] = headerNo // nginx: do not buffer the stream
	resp.WriteHeader(http.StatusOK)
	w := resp.Writer
	_, _ = w.Write(h.retryLine)
	return newStreamConn(w, h.opts.WriteTimeout)
}

// writeLocked writes p to the sink and flushes it (with any event held
// before it) within the write timeout. On failure the sink is detached: a
// timed-out write (the client stopped reading) cancels the query as
// client_stalled; a broken connection leaves it running for a resume.
func (l *eventLog) writeLocked(p []byte) error { return l.writeOrHoldLocked(p, true) }

// writeOrHoldLocked is writeLocked, or with flush false only the write:
// the event is held in the connection's buffer until the next flush, which
// then sends it with the events after it in one write.
func (l *eventLog) writeOrHoldLocked(p []byte, flush bool) error {
	sk := l.sink
	err := sk.conn.write(p, flush)
	if err == nil {
		return nil
	}
	sk.err = err
	l.sink = nil
	close(sk.done)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		l.goneLocked(pipeline.ErrClientStalled)
		return l.gone
	}
	l.detachedLocked()
	return nil
}

// detach is called when sk's client went away (its request context ended).
func (l *eventLog) detach(sk *sink) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.sink != sk || l.ended {
		return
	}
	l.sink = nil
	close(sk.done)
	l.detachedLocked()
}

// goneLocked cancels the query for cause; later events return the error.
func (l *eventLog) goneLocked(cause *pipeline.Cancel) {
	if l.gone != nil {
		return
	}
	l.gone = fmt.Errorf("stream of query %s: %w", l.id, cause)
	l.cancel(cause)
	if l.grace != nil {
		l.grace.Stop()
		l.grace = nil
	}
}

// heartbeat sends a keep-alive comment whenever the stream has been silent
// for every, until the stream ends (startHeartbeat).
func (l *eventLog) heartbeat(every time.Duration) {
	l.beat = startHeartbeat(&l.mu, every, func() time.Duration {
		if l.ended {
			return 0
		}
		if l.sink == nil || l.gone != nil {
			return every
		}
		if wait := beatAfter(every, l.sink.conn.lastWrite); wait > 0 {
			return wait
		}
		_ = l.writeLocked(keepAlive)
		return every
	})
}

// end closes the stream after the query finished.
func (l *eventLog) end() {
	l.mu.Lock()
	if l.sink != nil && l.sink.conn.pending && l.gone == nil {
		_ = l.writeLocked(nil) // a query ends with done or error, flushed; this is the safety net
	}
	// A client cut off while the answer finished has not seen its end:
	// its resume, due within the grace, still gets the rest.
	awaited := l.sink == nil && l.grace != nil && l.gone == nil
	l.ended = true
	if l.unpublish != nil {
		l.unpublish()
	}
	if sk := l.sink; sk != nil {
		l.sink = nil
		close(sk.done)
		sk.release()
	}
	if l.grace != nil {
		l.grace.Stop()
		l.grace = nil
	}
	if l.beat != nil {
		l.beat.Stop()
	}
	l.mu.Unlock()
	if awaited {
		l.hub.linger(l)
		return
	}
	l.hub.remove(l)
}
