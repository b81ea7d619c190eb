package api

import (
	"net/http"
	"sync"
	"time"
)

// streamConn is one client connection receiving a stream: /ask's events or
// the chat completion chunks of /v1/chat/completions. Each write is held
// in the connection's buffer or flushed with those held before it, under a
// write deadline that is moved only when less than the timeout is left, to
// 1.5 × the timeout ahead (re-arming it per event cost a timer update per
// token): a client that takes nothing is cut after between 1 and 1.5 × the
// timeout, and the write's error then wraps os.ErrDeadlineExceeded.
//
// It is not safe for concurrent use: the stream's own mutex guards it.
type streamConn struct {
	w         http.ResponseWriter
	rc        *http.ResponseController
	timeout   time.Duration
	deadline  time.Time // zero before the first write
	pending   bool      // written but not flushed
	lastWrite time.Time
}

func newStreamConn(w http.ResponseWriter, timeout time.Duration) streamConn {
	return streamConn{w: w, rc: http.NewResponseController(w), timeout: timeout}
}

// write writes p (which may be empty) and, with flush, flushes it with
// whatever is held before it; without, p is held until the next flush.
func (c *streamConn) write(p []byte, flush bool) error {
	now := time.Now()
	if c.deadline.Sub(now) < c.timeout {
		c.deadline = now.Add(c.timeout + c.timeout/2)
		_ = c.rc.SetWriteDeadline(c.deadline)
	}
	var err error
	if len(p) > 0 {
		_, err = c.w.Write(p)
	}
	if err == nil && flush {
		err = c.rc.Flush()
	}
	c.pending = !flush && err == nil && (c.pending || len(p) > 0)
	c.lastWrite = now
	return err
}

// release readies the connection for what the server writes after the
// handler (the chunked body's end, the next request on it): the write
// deadline must not outlive the stream. Not for a connection whose write
// failed: it is broken anyway, and closed by the server.
func (c *streamConn) release() {
	if !c.deadline.IsZero() {
		_ = c.rc.SetWriteDeadline(time.Time{})
	}
}

// startHeartbeat calls beat under mu whenever every has passed, on a timer
// rather than a goroutine of its own (an open stream holds no stack for
// it). beat sends a keep-alive comment if the stream has been silent for
// every and returns the wait until the next check, or 0 once the stream
// has ended. Stop the returned timer when the stream ends.
func startHeartbeat(mu *sync.Mutex, every time.Duration, beat func() time.Duration) *time.Timer {
	var t *time.Timer
	mu.Lock() // held until t is set: the timer's func takes it first
	defer mu.Unlock()
	t = time.AfterFunc(every, func() {
		mu.Lock()
		defer mu.Unlock()
		if next := beat(); next > 0 {
			t.Reset(next)
		}
	})
	return t
}

// beatAfter is a heartbeat's wait: what is left of every since the last
// write, or 0 when a keep-alive is due now.
func beatAfter(every time.Duration, lastWrite time.Time) time.Duration {
	if idle := time.Since(lastWrite); idle < every {
		return every - idle
	}
	return 0
}
