package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"

	"ragtime/jsontext"
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
	// scratch holds a hand-framed event's JSON between events.
	scratch []byte
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
	return s.write(name)
}

// write sends the buffered event and flushes it.
func (s *sseWriter) write(name string) error {
	if _, err := s.w.Write(s.buf.Bytes()); err != nil {
		return fmt.Errorf("writing %s event: %w", name, err)
	}
	if err := s.rc.Flush(); err != nil {
		return fmt.Errorf("flushing %s event: %w", name, err)
	}
	return nil
}

func (s *sseWriter) Meta(m pipeline.Meta) error { return s.event(EventMeta, m) }

// Stage writes a stage event, framed by hand as Delta is (nine per ask);
// a span with an attribute of another type than string, bool, int or
// float64 goes through encoding/json.
func (s *sseWriter) Stage(sp pipeline.Span) error {
	b, ok := appendSpan(s.scratch[:0], sp)
	s.scratch = b
	if !ok {
		return s.event(EventStage, sp)
	}
	s.buf.Reset()
	s.buf.WriteString("event: " + EventStage + "\ndata: ")
	s.buf.Write(b)
	s.buf.WriteString("\n\n")
	return s.write(EventStage)
}

// appendSpan appends sp as encoding/json (HTML escaping off) writes it;
// ok is false when an attribute has a type it does not write.
func appendSpan(b []byte, sp pipeline.Span) ([]byte, bool) {
	var ok bool
	b = append(b, `{"name":`...)
	b = jsontext.AppendString(b, sp.Name)
	b = append(b, `,"seq":`...)
	b = strconv.AppendInt(b, int64(sp.Seq), 10)
	b = append(b, `,"start_ms":`...)
	if b, ok = jsontext.AppendFloat(b, sp.StartMs); !ok {
		return b, false
	}
	b = append(b, `,"duration_ms":`...)
	if b, ok = jsontext.AppendFloat(b, sp.DurationMs); !ok {
		return b, false
	}
	if len(sp.Attrs) > 0 {
		b = append(b, `,"attrs":{`...)
		for i, k := range slices.Sorted(maps.Keys(sp.Attrs)) {
			if i > 0 {
				b = append(b, ',')
			}
			b = jsontext.AppendString(b, k)
			b = append(b, ':')
			if b, ok = jsontext.AppendScalar(b, sp.Attrs[k]); !ok {
				return b, false
			}
		}
		b = append(b, '}')
	}
	return append(b, '}'), true
}

func (s *sseWriter) Sources(src []pipeline.Source) error {
	if src == nil {
		src = []pipeline.Source{}
	}
	return s.event(EventSources, sourcesEvent{Sources: src})
}

// Delta writes a token (or reasoning) event. It is the one event per
// token, so it is framed by hand: no reflection, no encoder, no allocation
// once the buffer has grown.
func (s *sseWriter) Delta(d pipeline.Delta) error {
	name := EventToken
	if d.Reasoning {
		name = EventReasoning
	}
	s.buf.Reset()
	s.buf.WriteString("event: ")
	s.buf.WriteString(name)
	s.buf.WriteString("\ndata: {\"text\":")
	s.buf.Write(jsontext.AppendString(s.buf.AvailableBuffer(), d.Text))
	s.buf.WriteString("}\n\n")
	return s.write(name)
}

func (s *sseWriter) Done(rec pipeline.Record) error { return s.event(EventDone, rec.DoneEvent()) }

func (s *sseWriter) Fail(e *pipeline.Error) error { return s.event(EventError, e) }
