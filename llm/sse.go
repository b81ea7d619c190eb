package llm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"ragtime"
	"ragtime/internal/openaiwire"
	"ragtime/internal/sse"
	"ragtime/internal/upstream"
	"ragtime/pipeline"
)

// maxLine is the longest event-stream line accepted.
const maxLine = sse.MaxLine

// doneMarker is the data of OpenAI's last event.
var doneMarker = []byte("[DONE]")

// emitError carries an error returned by the caller's emit function, so it
// can be returned to the caller unchanged.
type emitError struct{ err error }

func (e emitError) Error() string { return e.err.Error() }
func (e emitError) Unwrap() error { return e.err }

// deliverer records and emits deltas; every provider's parser uses it, so
// FirstToken, LastToken and Chunks mean the same for all of them.
type deliverer struct {
	gen  *pipeline.Generation
	emit func(pipeline.Delta) error
}

// deliver records and emits one non-empty delta.
func (d deliverer) deliver(delta pipeline.Delta) error {
	if d.gen.FirstToken.IsZero() {
		d.gen.FirstToken = delta.At
		timing := *d.gen // the connection and request times, known by now
		delta.Timing = &timing
	}
	d.gen.LastToken = delta.At
	d.gen.Chunks++
	if err := d.emit(delta); err != nil {
		return emitError{err}
	}
	return nil
}

// setTiming stores a server-reported duration in milliseconds.
func setTiming(gen *pipeline.Generation, key string, ms float64) {
	if gen.ServerTimings == nil {
		gen.ServerTimings = make(map[string]float64, 4)
	}
	gen.ServerTimings[key] = ms
}

// streamReader parses an OpenAI chat completions event stream
// (text/event-stream of chat.completion.chunk objects) and fills gen.
type streamReader struct {
	gen      *pipeline.Generation
	emit     func(pipeline.Delta) error
	scrubber upstream.Scrubber

	dec      chunkDecoder
	framer   sse.Reader
	tmpl     chunkTemplate
	done     bool // data: [DONE] was seen
	finished bool // a finish_reason was seen
}

// streamChunk is the part of a chat.completion.chunk the reader uses.
// Choices is nil when the key is missing or null, and empty for "[]".
type streamChunk struct {
	Choices []streamChoice  `json:"choices"`
	Usage   *wireUsage      `json:"usage"`
	Error   json.RawMessage `json:"error"`
	// Timings is llama.cpp's, Metrics vLLM's per-request figures, XGroq
	// Groq's envelope (its usage carries queue_time and prompt_time).
	Timings *serverTimings `json:"timings"`
	Metrics *vllmMetrics   `json:"metrics"`
	XGroq   *struct {
		Usage *wireUsage `json:"usage"`
	} `json:"x_groq"`
}

type streamChoice struct {
	Delta struct {
		Content flexString `json:"content"`
		// ReasoningContent is DeepSeek's (and older vLLM's) field,
		// Reasoning vLLM's, OpenRouter's and Ollama's /v1.
		ReasoningContent flexString `json:"reasoning_content"`
		Reasoning        flexString `json:"reasoning"`
	} `json:"delta"`
	FinishReason *string `json:"finish_reason"`
}

// wireUsage is OpenAI's usage object and the server timings Groq adds to it.
type wireUsage struct {
	openaiwire.Usage
	// Groq's server timings, in seconds.
	QueueTime  *float64 `json:"queue_time"`
	PromptTime *float64 `json:"prompt_time"`
}

// serverTimings is llama.cpp's per-request timings object.
type serverTimings struct {
	CacheN      *int     `json:"cache_n"`
	PromptN     *int     `json:"prompt_n"`
	PromptMS    *float64 `json:"prompt_ms"`
	PredictedMS *float64 `json:"predicted_ms"`
	QueueMS     *float64 `json:"queue_ms"`
}

// vllmMetrics is vLLM's per-request metrics object, in the shapes it has
// taken: milliseconds (queue_time_ms, time_to_first_token_ms) and seconds
// (time_in_queue, prefill_time, decode_time, as the ragtime simulator
// sends).
type vllmMetrics struct {
	QueueTimeMS        *float64 `json:"queue_time_ms"`
	TimeToFirstTokenMS *float64 `json:"time_to_first_token_ms"`
	TimeInQueue        *float64 `json:"time_in_queue"`
	PrefillTime        *float64 `json:"prefill_time"`
	DecodeTime         *float64 `json:"decode_time"`
}

// flexString decodes a JSON string and ignores any other JSON value, so a
// provider sending a structured field where others send text does not break
// the stream.
type flexString string

func (f *flexString) UnmarshalJSON(b []byte) error {
	if len(b) == 0 || b[0] != '"' {
		*f = ""
		return nil
	}
	if len(b) >= 2 && bytes.IndexByte(b, '\\') < 0 {
		*f = flexString(b[1 : len(b)-1]) // no escapes: the bytes are the text
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	*f = flexString(s)
	return nil
}

// run reads the stream until [DONE], the end of the body, or an error. It
// returns emitError for emit failures, *ragtime.Error for malformed streams
// and the read error otherwise.
func (s *streamReader) run(body io.Reader) error {
	s.framer.Handle, s.framer.Clock = s.dispatch, clockOf(body)
	s.framer.TooLong = func() error {
		return s.badStream(fmt.Sprintf("an event-stream line is longer than %d bytes", maxLine), nil)
	}
	if _, err := s.framer.Run(body); err != nil {
		return err
	}
	if !s.done && !s.finished {
		return s.badStream("the stream ended before the model finished (no finish_reason and no [DONE])", nil)
	}
	return nil
}

// dispatch handles one event.
func (s *streamReader) dispatch(event string, data []byte, at time.Time) (bool, error) {
	if bytes.Equal(data, doneMarker) {
		s.done = true
		return true, nil
	}
	if event == "error" {
		return false, s.badStream("the model provider sent an error event mid-stream: "+s.errorText(data), nil)
	}
	if handled, err := s.fastChunk(data, at); handled {
		return false, err
	}
	// encoding/json's decode runs some 4 KB deep: on a goroutine of its
	// own, for the answer's goroutine parks in this stream for as long as
	// the answer streams, and is net/http's handler goroutine, which must
	// keep within its 8 KB (pipeline.Pipeline.Begin; make bench-streams).
	// An OpenAI-compatible stream's chunks take this way once, for the
	// usage at its end.
	var err error
	pipeline.OnOwnGoroutine(func() { err = s.fullChunk(data, at) })
	return false, err
}

// fullChunk decodes any chunk into streamChunk and acts on it.
func (s *streamReader) fullChunk(data []byte, at time.Time) error {
	var c streamChunk
	if err := s.dec.decode(data, &c); err != nil {
		return s.badStream(fmt.Sprintf("a stream chunk is not valid JSON; first bytes: %q", s.scrubber.Scrub(upstream.Truncate(string(data), 200))), err)
	}
	if len(c.Error) > 0 && !bytes.Equal(c.Error, []byte("null")) {
		return s.badStream("the model provider reported an error mid-stream: "+s.errorText(data), nil)
	}
	if c.Usage != nil {
		s.usage(c.Usage)
	}
	if c.XGroq != nil && c.XGroq.Usage != nil {
		s.usage(c.XGroq.Usage)
	}
	if c.Metrics != nil {
		s.metrics(c.Metrics)
	}
	if c.Timings != nil {
		s.serverTimings(c.Timings)
	}
	if c.Choices == nil && c.Usage == nil && c.Timings == nil && c.Metrics == nil && c.XGroq == nil {
		return s.badStream(fmt.Sprintf("a stream chunk has no choices; first bytes: %q", s.scrubber.Scrub(upstream.Truncate(string(data), 200))), nil)
	}
	d := deliverer{s.gen, s.emit}
	for i := range c.Choices {
		ch := &c.Choices[i]
		if ch.FinishReason != nil && *ch.FinishReason != "" {
			s.finished = true
			s.gen.FinishReason = *ch.FinishReason
		}
		r := ch.Delta.ReasoningContent
		if r == "" {
			r = ch.Delta.Reasoning
		}
		if r != "" {
			if err := d.deliver(pipeline.Delta{Text: string(r), Reasoning: true, At: at}); err != nil {
				return err
			}
		}
		if ch.Delta.Content != "" {
			if err := d.deliver(pipeline.Delta{Text: string(ch.Delta.Content), At: at}); err != nil {
				return err
			}
		}
	}
	return nil
}

// usage reads a usage object, keeping a cached-token count llama.cpp's
// timings may already have given.
func (s *streamReader) usage(w *wireUsage) {
	u := ragtime.Usage{PromptTokens: w.PromptTokens, CompletionTokens: w.CompletionTokens, CachedTokens: s.gen.Usage.CachedTokens}
	if w.PromptTokensDetails != nil {
		cached := w.PromptTokensDetails.CachedTokens
		u.CachedTokens = &cached
	}
	if w.CompletionTokensDetails != nil {
		u.ReasoningTokens = w.CompletionTokensDetails.ReasoningTokens
	}
	if u.PromptTokens != 0 || u.CompletionTokens != 0 || s.gen.Usage.PromptTokens == 0 {
		s.gen.Usage = u
	}
	if w.QueueTime != nil {
		setTiming(s.gen, ragtime.ServerQueueMs, *w.QueueTime*1000)
	}
	if w.PromptTime != nil {
		setTiming(s.gen, ragtime.ServerPrefillMs, *w.PromptTime*1000)
	}
}

func (s *streamReader) metrics(m *vllmMetrics) {
	if m.TimeInQueue != nil {
		setTiming(s.gen, ragtime.ServerQueueMs, *m.TimeInQueue*1000)
	}
	if m.PrefillTime != nil {
		setTiming(s.gen, ragtime.ServerPrefillMs, *m.PrefillTime*1000)
	}
	if m.DecodeTime != nil {
		setTiming(s.gen, ragtime.ServerDecodeMs, *m.DecodeTime*1000)
	}
	if m.QueueTimeMS != nil {
		setTiming(s.gen, ragtime.ServerQueueMs, *m.QueueTimeMS)
	}
	if m.TimeToFirstTokenMS != nil {
		// vLLM's time to first token counts from arrival: the queue is
		// part of it.
		p := *m.TimeToFirstTokenMS
		if m.QueueTimeMS != nil {
			p -= *m.QueueTimeMS
		}
		setTiming(s.gen, ragtime.ServerPrefillMs, max(p, 0))
	}
}

func (s *streamReader) serverTimings(t *serverTimings) {
	if t.PromptMS != nil {
		setTiming(s.gen, ragtime.ServerPrefillMs, *t.PromptMS)
	}
	if t.PredictedMS != nil {
		setTiming(s.gen, ragtime.ServerDecodeMs, *t.PredictedMS)
	}
	if t.QueueMS != nil {
		setTiming(s.gen, ragtime.ServerQueueMs, *t.QueueMS)
	}
	if c := s.gen.Usage.CachedTokens; t.CacheN != nil && (c == nil || *c == 0) {
		cached := *t.CacheN
		s.gen.Usage.CachedTokens = &cached
	}
	if t.PromptN != nil && s.gen.Usage.PromptTokens == 0 {
		s.gen.Usage.PromptTokens = *t.PromptN
		if c := s.gen.Usage.CachedTokens; c != nil {
			s.gen.Usage.PromptTokens += *c
		}
	}
}

// errorText renders an error payload found in the stream, scrubbed.
func (s *streamReader) errorText(data []byte) string { return errorText(s.scrubber, data) }

func errorText(sc upstream.Scrubber, data []byte) string {
	ue := upstream.ParseError(data)
	msg := ue.Message
	if ue.Code != "" {
		msg = ue.Code + ": " + msg
	} else if ue.Type != "" {
		msg = ue.Type + ": " + msg
	}
	if msg == "" {
		msg = string(data)
	}
	return sc.Scrub(upstream.Truncate(msg, 300))
}

// badStream builds the llm_bad_stream error for the current position.
func (s *streamReader) badStream(msg string, cause error) *ragtime.Error {
	return badStream(s.gen, s.scrubber, "an OpenAI chat completions stream", msg, cause)
}

func badStream(gen *pipeline.Generation, sc upstream.Scrubber, format, msg string, cause error) *ragtime.Error {
	return &ragtime.Error{
		Stage:     gen.FailedStage(),
		Kind:      ragtime.KindUpstreamMalformed,
		Code:      CodeBadStream,
		Message:   msg,
		Hint:      "the server at --llm-base-url did not send a valid " + format + "; check --llm-provider matches the server and look at its logs",
		Status:    gen.UpstreamStatus,
		RequestID: gen.RequestID,
		Err:       sc.Wrap(cause),
	}
}

// chunkDecoder decodes one JSON value per event with a reused json.Decoder,
// which keeps its scanner and field-stack buffers between chunks (about half
// the allocations of json.Unmarshal per chunk). It is as strict as
// json.Unmarshal: anything but white space after the value is an error.
type chunkDecoder struct {
	rd  bytes.Reader
	dec *json.Decoder
	fed int64 // bytes given to dec so far
}

var errTrailingData = errors.New("unexpected data after the JSON value")

func (d *chunkDecoder) decode(data []byte, v any) error {
	if d.dec == nil {
		d.dec, d.fed = json.NewDecoder(&d.rd), 0
	}
	d.rd.Reset(data)
	d.fed += int64(len(data))
	err := d.dec.Decode(v)
	if err == nil && d.dec.InputOffset() != d.fed {
		// The decoder holds bytes after the value; only white space may
		// follow, and a fresh decoder must start the next chunk.
		if rest := data[len(data)-int(d.fed-d.dec.InputOffset()):]; len(bytes.TrimSpace(rest)) > 0 {
			err = errTrailingData
		}
		d.dec = nil
	}
	if err != nil {
		d.dec = nil
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
	}
	return err
}
