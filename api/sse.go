package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"unicode/utf8"

	"ragtime/pipeline"
)

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

func (s *sseWriter) Meta(m pipeline.Meta) error   { return s.event("meta", m) }
func (s *sseWriter) Stage(sp pipeline.Span) error { return s.event("stage", sp) }

func (s *sseWriter) Sources(src []pipeline.Source) error {
	if src == nil {
		src = []pipeline.Source{}
	}
	return s.event("sources", map[string]any{"sources": src})
}

// Delta writes a token (or reasoning) event. It is the one event per
// token, so it is framed by hand: no reflection, no encoder, no allocation
// once the buffer has grown.
func (s *sseWriter) Delta(d pipeline.Delta) error {
	name := "token"
	if d.Reasoning {
		name = "reasoning"
	}
	s.buf.Reset()
	s.buf.WriteString("event: ")
	s.buf.WriteString(name)
	s.buf.WriteString("\ndata: {\"text\":")
	s.buf.Write(appendJSONString(s.buf.AvailableBuffer(), d.Text))
	s.buf.WriteString("}\n\n")
	return s.write(name)
}

func (s *sseWriter) Done(rec pipeline.Record) error { return s.event("done", doneEvent(rec)) }

func (s *sseWriter) Fail(e *pipeline.Error) error { return s.event("error", e) }

// doneEvent is the done event's body: the record without what the client
// sent itself or what only storage needs.
func doneEvent(rec pipeline.Record) map[string]any {
	return map[string]any{
		"query_id":        rec.QueryID,
		"model":           rec.Model,
		"ttft_ms":         rec.TTFTMs,
		"first_token_ms":  rec.FirstTokenMs,
		"e2e_ms":          rec.E2EMs,
		"queue_ms":        rec.QueueMs,
		"retrieval_ms":    rec.RetrievalMs,
		"gen_ttft_ms":     rec.GenTTFTMs,
		"llm_prefill_ms":  rec.LLMPrefillMs,
		"overhead_ms":     rec.OverheadMs,
		"reasoning_ms":    rec.ReasoningMs,
		"retrieval_share": rec.RetrievalShare,
		"prefill_share":   rec.PrefillShare,
		"usage":           rec.Usage,
		"stages":          rec.Stages,
	}
}

// appendJSONString appends s as a JSON string, exactly as encoding/json
// writes it with HTML escaping off: invalid UTF-8 becomes U+FFFD, and
// U+2028 and U+2029 are escaped for JavaScript.
func appendJSONString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		b := s[i]
		if b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '"', '\\':
				dst = append(dst, '\\', b)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[b>>4], hex[b&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
