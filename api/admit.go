package api

import (
	"context"
	"errors"
	"math"
	"net/http"
	"net/netip"
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
	attrs := map[string]any{"limit": 0, "caller_limit": who.Limits.Concurrent}
	if s.deps.Admission == nil {
		req.Queue = &pipeline.QueueWait{Start: arrived, End: arrived, Attrs: attrs}
		return nil, nil
	}
	attrs["limit"] = s.deps.Admission.MaxStreams()
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
	req.Queue = &pipeline.QueueWait{Start: arrived, End: time.Now(), Attrs: attrs}
	return t, nil
}
