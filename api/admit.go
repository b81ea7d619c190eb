package api

import (
	"context"
	"errors"
	"maps"
	"math"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"ragtime/admission"
	"ragtime/auth"
	"ragtime/pipeline"
)

// Admitter decides whether an ask may start; *admission.Controller
// implements it.
type Admitter interface {
	Admit(ctx context.Context, who admission.Caller) (*admission.Ticket, error)
	MaxStreams() int
}

// admissionCaller is who caller is to admission control: auth.Caller.ID
// (its key; a publishable key per key and client address, as it sits in
// many browsers; without a key its client IP, an IPv6 client by its /64,
// which one host usually holds whole) with the key's own --rate and
// --concurrency, each defaulting to Deps.CallerLimits. The address is the
// connection's peer: behind a reverse proxy every keyless caller is the
// proxy.
func (s *server) admissionCaller(caller auth.Caller) admission.Caller {
	limits := s.deps.CallerLimits
	rt, n := caller.Limits()
	if rt.N > 0 {
		limits.Rate = rt
	}
	if n > 0 {
		limits.Concurrent = n
	}
	return admission.Caller{ID: caller.ID(), Limits: limits}
}

func clientIP(r *http.Request) string {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	addr := ap.Addr().Unmap()
	if addr.Is6() {
		if p, err := addr.Prefix(64); err == nil {
			return p.String()
		}
	}
	return addr.String()
}

// admit runs admission control for an ask: on success the query's queue
// stage is the time it waited, and the ticket must be released when the
// stream ends.
func (s *server) admit(c echo.Context, caller auth.Caller, req *pipeline.Request) (*admission.Ticket, error) {
	arrived := time.Now()
	who := s.admissionCaller(caller)
	if s.deps.Admission == nil {
		req.Queue = &pipeline.QueueWait{Start: arrived, End: arrived, Attrs: s.queueAttrs.get(0, who.Limits.Concurrent)}
		return nil, nil
	}
	attrs := s.queueAttrs.get(s.deps.Admission.MaxStreams(), who.Limits.Concurrent)
	t, err := s.deps.Admission.Admit(c.Request().Context(), who)
	if err != nil {
		var rej *admission.Rejection
		if errors.As(err, &rej) {
			status := http.StatusTooManyRequests
			if rej.Reason == admission.ReasonServer {
				status = http.StatusServiceUnavailable
			}
			return nil, &apiError{Status: status, Code: rej.Reason, Message: rej.Message,
				retryAfter: int(math.Ceil(rej.Retry.Seconds()))}
		}
		return nil, err // the client went away while queued
	}
	end := time.Now()
	if d, calls := t.Shared(); calls > 0 {
		// The round trips to the shared state are the ask's own: a map
		// per ask, as the shared ones are never modified.
		own := make(map[string]any, len(attrs)+2)
		maps.Copy(own, attrs)
		own["redis_ms"] = float64(d.Round(time.Microsecond)) / 1e6
		own["redis_calls"] = calls
		attrs = own
	}
	req.Queue = &pipeline.QueueWait{Start: arrived, End: end, Attrs: attrs}
	return t, nil
}

// queueAttrs hands out the queue stage's attrs, one map per pair of limits
// shared by every ask under them: a stage's attrs are held for as long as
// its stream (the record's, the done event's), and a map made per ask took
// 336 bytes of each held stream (make bench-streams). The pairs are few (the
// server's bound, the callers' limits); past maxQueueAttrs of them a map is
// made per ask. A shared map is never modified: a span's attrs are not
// changed once sent (pipeline.Stream), nor a recorded query's.
type queueAttrs struct {
	mu sync.RWMutex
	m  map[[2]int]map[string]any
}

const maxQueueAttrs = 64

func (c *queueAttrs) get(limit, callerLimit int) map[string]any {
	key := [2]int{limit, callerLimit}
	c.mu.RLock()
	attrs, ok := c.m[key]
	c.mu.RUnlock()
	if ok {
		return attrs
	}
	attrs = map[string]any{"limit": limit, "caller_limit": callerLimit}
	c.mu.Lock()
	defer c.mu.Unlock()
	if shared, ok := c.m[key]; ok {
		return shared
	}
	if len(c.m) < maxQueueAttrs {
		if c.m == nil {
			c.m = make(map[[2]int]map[string]any)
		}
		c.m[key] = attrs
	}
	return attrs
}
