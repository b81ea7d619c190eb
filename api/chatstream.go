package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"ragtime"
	"ragtime/internal/openaiwire"
	"ragtime/pipeline"
)

// chatStream is a pipeline.Stream that answers in OpenAI's chat completion
// shapes: with stream set, chat.completion.chunk objects as Server-Sent
// Events, each written and flushed before the method returns (so TTFT is
// still the first answer token handed to the client's socket); without it, one
// chat.completion object written once the query has finished.
//
// The stream, in order: a chunk with the assistant role, a chunk per
// answer delta (reasoning as delta.reasoning_content), a chunk with
// finish_reason, the usage chunk when stream_options.include_usage is set,
// a chunk with empty choices and the ragtime object (query id, sources and
// the done event's figures), then data: [DONE]. A failure after the
// stream started is a data line with OpenAI's error object instead.
type chatStream struct {
	c         echo.Context
	opts      StreamOptions
	maxTokens int
	stream    bool
	usage     bool

	id, model string
	created   int64
	enc       openaiwire.ChunkEncoder // the role, token and finish chunks

	// mu guards the connection: the pipeline writes chunks, the heartbeat
	// writes ": keep-alive" comments while the stream is silent.
	mu        sync.Mutex
	conn      streamConn // set when the stream's headers went out
	started   bool       // the stream's headers went out
	ended     bool       // the query finished: the heartbeat stops
	broken    bool       // a write failed: nothing more is written
	beat      *time.Timer
	text      strings.Builder
	reasoning strings.Builder
	sources   []pipeline.Source
	done      *ragtime.Record
	failed    *ragtime.Error
	scratch   []byte
	// res is a resumable stream's state (chatresume.go); nil for a plain
	// one.
	res *chatResume
}

func newChatStream(c echo.Context, opts StreamOptions, maxTokens int, stream, usage bool) *chatStream {
	return &chatStream{c: c, opts: opts, maxTokens: maxTokens, stream: stream, usage: usage, created: timeNow().Unix()}
}

// chatChunk is a chat.completion.chunk or a chat.completion, with the
// ragtime object beside OpenAI's fields.
type chatChunk struct {
	openaiwire.Chunk
	Ragtime *chatExtended `json:"ragtime,omitempty"`
}

// chatExtended is the ragtime object: the done event's body (query id,
// figures, usage, stages) and the sources the answer cites as [n].
type chatExtended struct {
	ragtime.DoneEvent
	Sources []pipeline.Source `json:"sources"`
}

func usageOf(u ragtime.Usage) *openaiwire.Usage {
	out := &openaiwire.Usage{PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens,
		TotalTokens:             u.PromptTokens + u.CompletionTokens,
		PromptTokensDetails:     &openaiwire.PromptTokensDetails{},
		CompletionTokensDetails: &openaiwire.CompletionTokensDetails{ReasoningTokens: u.ReasoningTokens}}
	if u.CachedTokens != nil {
		out.PromptTokensDetails.CachedTokens = *u.CachedTokens
	}
	return out
}

func (s *chatStream) chunk(choices ...openaiwire.Choice) chatChunk {
	if choices == nil {
		choices = []openaiwire.Choice{}
	}
	return chatChunk{Chunk: openaiwire.Chunk{ID: s.id, Object: openaiwire.ObjectChunk, Created: s.created, Model: s.model, Choices: choices}}
}

// writeChunk sends a chunk the encoder frames (frame appends it to the
// scratch buffer), flushed with any held before it, or held until the next
// flush.
func (s *chatStream) writeChunk(frame func([]byte) []byte, flush bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.scratch = frame(s.scratch[:0])
	return s.writeLocked(s.scratch, flush)
}

// write sends one data line and flushes it with any held before it, or
// with flush false holds it until the next flush (see streamConn).
func (s *chatStream) write(v any, flush bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := append(s.scratch[:0], "data: "...)
	if raw, ok := v.([]byte); ok {
		b = append(b, raw...)
	} else {
		j, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("encoding a chat completion chunk: %w", err)
		}
		b = append(b, j...)
	}
	b = append(b, "\n\n"...)
	s.scratch = b
	return s.writeLocked(b, flush)
}

// writeLocked writes b to the connection; a client that takes nothing
// within the write timeout is cut as client_stalled.
func (s *chatStream) writeLocked(b []byte, flush bool) error {
	if s.res != nil {
		return s.res.emitLocked(b, flush)
	}
	err := s.conn.write(b, flush)
	if err != nil {
		s.broken = true
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return fmt.Errorf("writing a chat completion chunk: %w", pipeline.ErrClientStalled)
	}
	if err != nil {
		return fmt.Errorf("writing a chat completion chunk: %w", err)
	}
	return nil
}

func (s *chatStream) Meta(m pipeline.Meta) error {
	s.id, s.model = "chatcmpl-"+m.QueryID, m.Model
	h := s.c.Response().Header()
	h.Set(HeaderQueryID, m.QueryID)
	if !s.stream {
		return nil
	}
	if s.res != nil {
		s.startResumable(m.QueryID)
	} else {
		h.Set("Content-Type", "text/event-stream; charset=utf-8")
		h.Set("Cache-Control", "no-cache")
		h.Set("X-Accel-Buffering", "no")
		s.c.Response().WriteHeader(http.StatusOK)
		s.mu.Lock()
		s.started = true
		s.conn = newStreamConn(s.c.Response(), s.opts.WriteTimeout)
		s.enc = openaiwire.NewChunkEncoder(s.id, s.model, s.created, false)
		s.mu.Unlock()
	}
	err := s.writeChunk(s.enc.Role, true)
	if err == nil && s.opts.Heartbeat > 0 {
		s.heartbeat(s.opts.Heartbeat)
	}
	return err
}

// heartbeat writes an SSE comment whenever the stream has been silent for
// every (--sse-heartbeat), as /ask's streams do, so that proxies do not
// cut it during a long prefill; OpenAI clients skip comments.
func (s *chatStream) heartbeat(every time.Duration) {
	s.beat = startHeartbeat(&s.mu, every, func() time.Duration {
		if s.ended || s.broken {
			return 0
		}
		if r := s.res; r != nil {
			if r.sink == nil {
				return every
			}
			if wait := beatAfter(every, r.sink.conn.lastWrite); wait > 0 {
				return wait
			}
			_ = r.writeLocked(keepAlive, true) // not kept: not a chunk
			return every
		}
		if wait := beatAfter(every, s.conn.lastWrite); wait > 0 {
			return wait
		}
		if s.writeLocked(keepAlive, true) != nil {
			return 0
		}
		return every
	})
}

// Stage sends nothing: the stages arrive together in the ragtime object.
func (s *chatStream) Stage(pipeline.StageSpan) error { return nil }

func (s *chatStream) Sources(src []pipeline.Source) error {
	if src == nil {
		src = []pipeline.Source{}
	}
	s.sources = src
	return nil
}

func (s *chatStream) Delta(d pipeline.Delta) error {
	if !s.stream {
		if d.Reasoning {
			s.reasoning.WriteString(d.Text)
		} else {
			s.text.WriteString(d.Text)
		}
		return nil
	}
	field := "content"
	if d.Reasoning {
		field = "reasoning_content"
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.scratch = s.enc.Delta(s.scratch[:0], field, "", d.Text)
	// A delta the generator marked More waits for the next one's flush.
	return s.writeLocked(s.scratch, !d.More)
}

// finishReason is OpenAI's finish_reason for rec: the provider's own,
// in OpenAI's words (Anthropic's end_turn is stop, its max_tokens length),
// or, when it said none (the extractive generator), length when the answer
// used all of max_tokens and stop otherwise.
func (s *chatStream) finishReason(rec ragtime.Record) *string {
	reason := "stop"
	switch rec.FinishReason {
	case "stop", "length", "content_filter", "tool_calls":
		reason = rec.FinishReason
	case "max_tokens":
		reason = "length"
	case "end_turn", "stop_sequence":
	default:
		if s.maxTokens > 0 && rec.Usage.CompletionTokens >= s.maxTokens {
			reason = "length"
		}
	}
	return &reason
}

func (s *chatStream) Done(rec ragtime.Record) error {
	s.done = &rec
	if !s.stream {
		return nil
	}
	reason := *s.finishReason(rec)
	if err := s.writeChunk(func(b []byte) []byte { return s.enc.Finish(b, reason) }, false); err != nil {
		return err
	}
	if s.usage {
		ch := s.chunk()
		ch.Usage = usageOf(rec.Usage)
		if err := s.write(ch, false); err != nil {
			return err
		}
	}
	ch := s.chunk()
	ch.Ragtime = &chatExtended{DoneEvent: rec.DoneEvent(), Sources: s.sources}
	if err := s.write(ch, false); err != nil {
		return err
	}
	return s.write([]byte("[DONE]"), true) // the answer's last chunks in one write
}

// chatFailure is the data line of a failure after the stream started:
// OpenAI's error object, and the query id, stage and hint beside it.
type chatFailure struct {
	Error   openaiwire.Error `json:"error"`
	Ragtime struct {
		QueryID string `json:"query_id"`
		Stage   string `json:"stage,omitempty"`
		Hint    string `json:"hint,omitempty"`
	} `json:"ragtime"`
}

func (s *chatStream) failure(e *ragtime.Error) chatFailure {
	var f chatFailure
	ae := &apiError{Status: failureStatus(e), Code: e.Code, Message: e.Message, Hint: e.Hint}
	f.Error = asOpenAIError(ae)
	f.Ragtime.QueryID, f.Ragtime.Stage, f.Ragtime.Hint = strings.TrimPrefix(s.id, "chatcmpl-"), e.Stage, e.Hint
	return f
}

func (s *chatStream) Fail(e *ragtime.Error) error {
	e = callerFailure(s.opts.log, strings.TrimPrefix(s.id, "chatcmpl-"), e)
	s.failed = e
	if !s.stream {
		return nil
	}
	return s.write(s.failure(e), true)
}

// failureStatus is the HTTP status of a non-streamed answer that failed
// with e: its Kind's (kindStatus).
func failureStatus(e *ragtime.Error) int {
	return kindStatusOf(e.Kind)
}

// finish answers a non-streamed request once the query has run: the
// chat.completion with the ragtime object beside choices, or the failure
// in OpenAI's error shape. A streamed request has been answered already;
// a query cancelled because its client left is answered nothing.
func (s *chatStream) finish() {
	s.mu.Lock()
	s.ended = true
	if s.beat != nil {
		s.beat.Stop()
	}
	if s.res != nil {
		s.res.endLocked()
		s.mu.Unlock()
		return
	}
	if s.started && !s.broken {
		if s.conn.pending {
			_ = s.conn.write(nil, true) // a stream ends flushed; the safety net
		}
		s.conn.release()
	}
	s.mu.Unlock()
	if s.stream || s.c.Response().Committed {
		return
	}
	switch {
	case s.done != nil:
		text := s.text.String()
		msg := &openaiwire.Delta{Role: "assistant", Content: &text}
		if s.reasoning.Len() > 0 {
			r := s.reasoning.String()
			msg.ReasoningContent = &r
		}
		body := chatChunk{Chunk: openaiwire.Chunk{ID: s.id, Object: openaiwire.ObjectCompletion, Created: s.created, Model: s.model,
			Choices: []openaiwire.Choice{{Message: msg, FinishReason: s.finishReason(*s.done)}},
			Usage:   usageOf(s.done.Usage)}, Ragtime: &chatExtended{DoneEvent: s.done.DoneEvent(), Sources: s.sources}}
		_ = s.c.JSON(http.StatusOK, body)
	case s.failed != nil:
		_ = s.c.JSON(failureStatus(s.failed), s.failure(s.failed))
	}
}
