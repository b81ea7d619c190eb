package llm

import (
	"io"
	"time"

	"ragtime/pipeline"
)

// deltaHold sits between a response's parser and the caller's emit: it
// keeps each delta until the parser has the next one or is about to read
// the body again, and marks a delta pipeline.Delta.More when the next was
// already parsed. The deltas of one network read thus reach the caller with
// all but the last marked, and a stream that groups writes sends them to
// its client in one write instead of one per token (at 100 concurrent
// streams one upstream read carried about two tokens, each costing a
// write syscall of its own).
//
// Nothing is held across a wait on the network: Read emits the held delta
// before it reads the body. The delta keeps the time it was received (At),
// so the pipeline's per-token timing does not change. That time is when the
// bytes reached the socket, by the kernel's stamp where the connection has
// one (received, the call's upstream.Trace.Received), so that a wait of
// ragtime's to read them counts as its own, not the model's.
type deltaHold struct {
	emit     func(pipeline.Delta) error
	body     io.Reader
	received func() time.Time // nil, or zero when there is no stamp
	held     pipeline.Delta
	has      bool
}

// now is when the bytes just read reached the socket: the kernel's stamp
// of the latest read where there is one, else the time now.
func (h *deltaHold) now() time.Time {
	now := time.Now()
	if h.received != nil {
		if at := h.received(); !at.IsZero() && !at.After(now) {
			return at
		}
	}
	return now
}

// readClock is a body that says when its latest read's bytes arrived.
type readClock interface{ now() time.Time }

// clockOf is the clock a parser reading body stamps its events with:
// body's arrival stamps when it has them (deltaHold), else time.Now.
func clockOf(body io.Reader) func() time.Time {
	if c, ok := body.(readClock); ok {
		return c.now
	}
	return time.Now
}

// add holds d, first emitting the delta held before it, marked More.
func (h *deltaHold) add(d pipeline.Delta) error {
	if h.has {
		h.held.More = true
		h.has = false
		if err := h.emit(h.held); err != nil {
			return err
		}
	}
	h.held, h.has = d, true
	return nil
}

// release emits the held delta, if any.
func (h *deltaHold) release() error {
	if !h.has {
		return nil
	}
	d := h.held
	h.held, h.has = pipeline.Delta{}, false
	return h.emit(d)
}

// Read reads the body after emitting the held delta; an error of the
// caller's emit comes back as emitError, as the parsers' own do.
func (h *deltaHold) Read(p []byte) (int, error) {
	if err := h.release(); err != nil {
		return 0, emitError{err}
	}
	return h.body.Read(p)
}
