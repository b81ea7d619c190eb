package upstream

import (
	"context"
	"net"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"
)

// Prewarming. A model server that closes its connection after every
// streamed answer (llama-server does), or a keep-alive pool gone idle,
// makes every ask pay DNS and TCP after retrieval, on the critical path.
// Client.Prewarm, called when retrieval starts, dials a connection in the
// background when the host's pool holds no idle one; the call that needs a
// connection next takes it from the warmer instead of dialling (or waits
// for the dial already under way, which is nearer its end than a new one).

// warmTTL is how long a prewarmed connection waits to be taken before it
// is closed: under the keep-alive timeouts of common servers (llama.cpp's
// is 5 s), so a server does not close it first.
const warmTTL = 4 * time.Second

// maxWarm bounds the connections being prewarmed or waiting per host.
const maxWarm = 64

// warmer holds one host's prewarmed connections and counts its idle
// keep-alive ones (HTTP/1: the Trace's hooks and conn.Close keep the count).
type warmer struct {
	addr string // host:port dialled
	dial func(ctx context.Context, network, addr string) (*conn, error)
	idle atomic.Int64

	mu    sync.Mutex
	slots []*warmSlot // oldest first
}

// warmSlot is one prewarmed connection: c is set (nil if the dial failed)
// when done is closed.
type warmSlot struct {
	done chan struct{}
	c    *conn
}

// warmState is what a pooled connection carries for prewarming.
type warmState struct {
	w      *warmer
	idle   atomic.Bool
	closed atomic.Bool
	// cost is what dialling it took when it was prewarmed (0: it was not).
	cost time.Duration
}

// newWarmer returns the warmer of base's host, or nil when prewarming does
// not apply: only plain-HTTP hosts reached without a proxy are prewarmed
// (over TLS the handshake would still be on the path, and HTTPS providers
// keep their connections alive).
func newWarmer(base string, dial func(ctx context.Context, network, addr string) (*conn, error)) *warmer {
	u, err := url.Parse(base)
	if err != nil || u.Scheme != "http" || u.Hostname() == "" {
		return nil
	}
	if p, err := http.ProxyFromEnvironment(&http.Request{URL: u}); err != nil || p != nil {
		return nil
	}
	port := u.Port()
	if port == "" {
		port = "80"
	}
	return &warmer{addr: net.JoinHostPort(u.Hostname(), port), dial: dial}
}

// Prewarm starts dialling a connection to the host in the background when
// its pool holds no idle keep-alive connection, and reports whether it
// did. It does not wait: the dial runs while the caller works (retrieval),
// and the next call to the host takes the connection. ctx's values carry
// over; its cancellation does not (the connection may serve another call).
func (c *Client) Prewarm(ctx context.Context) bool {
	w := c.warm
	if w == nil || w.idle.Load() > 0 {
		return false
	}
	w.mu.Lock()
	if len(w.slots) >= maxWarm {
		w.mu.Unlock()
		return false
	}
	s := &warmSlot{done: make(chan struct{})}
	w.slots = append(w.slots, s)
	w.mu.Unlock()
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	go func() {
		defer cancel()
		start := time.Now()
		pc, err := w.dial(dctx, "tcp", w.addr)
		if err == nil {
			pc.warm.cost = max(time.Since(start), time.Nanosecond)
			s.c = pc
		}
		close(s.done)
		if s.c != nil {
			time.AfterFunc(warmTTL, func() { w.expire(s) })
		}
	}()
	return true
}

// expire closes s's connection if no call took it.
func (w *warmer) expire(s *warmSlot) {
	w.mu.Lock()
	for i, x := range w.slots {
		if x == s {
			w.slots = append(w.slots[:i], w.slots[i+1:]...)
			w.mu.Unlock()
			_ = s.c.Close()
			return
		}
	}
	w.mu.Unlock()
}

// take returns a prewarmed connection to addr, waiting for one being
// dialled, or nil when there is none (the caller dials).
func (w *warmer) take(ctx context.Context, addr string) *conn {
	if w == nil || addr != w.addr || ctx.Value(takeWarmKey{}) == nil {
		return nil
	}
	for {
		w.mu.Lock()
		if len(w.slots) == 0 {
			w.mu.Unlock()
			return nil
		}
		s := w.slots[0]
		w.slots = w.slots[1:]
		w.mu.Unlock()
		select {
		case <-s.done:
		case <-ctx.Done():
			go func() { // nobody will take it
				<-s.done
				if s.c != nil {
					_ = s.c.Close()
				}
			}()
			return nil
		}
		if s.c != nil {
			return s.c
		}
	}
}

// adopt makes c one of w's connections (its idle time counted).
func (w *warmer) adopt(c *conn) *conn {
	c.warm.w = w
	return c
}

// markIdle notes that c went back to its pool's idle list.
func (c *conn) markIdle() {
	if c == nil || c.warm.w == nil || !c.warm.idle.CompareAndSwap(false, true) {
		return
	}
	c.warm.w.idle.Add(1)
	if c.warm.closed.Load() { // closed meanwhile: Close may have missed it
		c.markBusy()
	}
}

// markBusy notes that c left its pool's idle list (taken, or closed).
func (c *conn) markBusy() {
	if c != nil && c.warm.w != nil && c.warm.idle.CompareAndSwap(true, false) {
		c.warm.w.idle.Add(-1)
	}
}

// Close closes the connection, and counts it out of the idle ones.
func (c *conn) Close() error {
	c.warm.closed.Store(true)
	c.markBusy()
	return c.Conn.Close()
}

type takeWarmKey struct{}

// warmContext returns the context of the call's request: one that lets
// its dial take a prewarmed connection when t.TakeWarm is set.
func (t *Trace) warmContext(ctx context.Context) context.Context {
	if !t.TakeWarm {
		return ctx
	}
	return context.WithValue(ctx, takeWarmKey{}, true)
}

// Idle reports whether the host's pool holds an idle keep-alive
// connection (HTTP/1 over plain HTTP; false where prewarming does not apply).
func (c *Client) Idle() bool { return c.warm != nil && c.warm.idle.Load() > 0 }
