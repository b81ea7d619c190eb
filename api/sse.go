package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"

	"ragtime/pipeline"
)

// Names of the /ask stream's events, shared by the writer and the Client.
const (
	EventMeta      = "meta"
	EventStage     = "stage"
	EventSources   = "sources"
	EventToken     = "token"
	EventReasoning = "reasoning"
	EventDone      = "done"
	EventError     = "error"
)

// sourcesEvent is the sources event's body.
type sourcesEvent struct {
	Sources []pipeline.Source `json:"sources"`
}

// sseWriter writes one query's events as Server-Sent Events, flushing each
// as soon as it is written. It implements pipeline.Stream; the pipeline
// calls it from one goroutine.
type sseWriter struct {
	w   http.ResponseWriter
	rc  *http.ResponseController
	buf bytes.Buffer
}

// newSSEWriter sends the stream's headers and returns the writer.
func newSSEWriter(w http.ResponseWriter) (*sseWriter, error) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	h.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	w.WriteHeader(http.StatusOK)
	s := &sseWriter{w: w, rc: http.NewResponseController(w)}
	return s, nil
}

// event writes "event: name\ndata: <json>\n\n" and flushes it.
func (s *sseWriter) event(name string, v any) error {
	s.buf.Reset()
	s.buf.WriteString("event: ")
	s.buf.WriteString(name)
	s.buf.WriteString("\ndata: ")
	enc := json.NewEncoder(&s.buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil { // Encode ends with '\n'
		return fmt.Errorf("encoding %s event: %w", name, err)
	}
	s.buf.WriteByte('\n')
	if _, err := s.w.Write(s.buf.Bytes()); err != nil {
		return fmt.Errorf("writing %s event: %w", name, err)
	}
	if err := s.rc.Flush(); err != nil {
		return fmt.Errorf("flushing %s event: %w", name, err)
	}
	return nil
}

func (s *sseWriter) Meta(m pipeline.Meta) error   { return s.event(EventMeta, m) }
func (s *sseWriter) Stage(sp pipeline.Span) error { return s.event(EventStage, sp) }

func (s *sseWriter) Sources(src []pipeline.Source) error {
	if src == nil {
		src = []pipeline.Source{}
	}
	return s.event(EventSources, sourcesEvent{Sources: src})
}

func (s *sseWriter) Delta(d pipeline.Delta) error {
	if d.Reasoning {
		return s.event(EventReasoning, d)
	}
	return s.event(EventToken, d)
}

func (s *sseWriter) Done(rec pipeline.Record) error { return s.event(EventDone, rec.DoneEvent()) }

func (s *sseWriter) Fail(e *pipeline.Error) error { return s.event(EventError, e) }
