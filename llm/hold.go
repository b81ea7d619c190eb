package llm

import (
	"io"

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
// so the pipeline's per-token timing does not change.
type deltaHold struct {
	emit func(pipeline.Delta) error
	body io.Reader
	held pipeline.Delta
	has  bool
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
