package llm

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"ragtime/pipeline"
)

// maxLine is the longest event-stream line accepted (bufio.Scanner's default
// of 64 KiB is too small for some providers' final chunks).
const maxLine = 1 << 20

// emitError carries an error returned by the caller's emit function, so it
// can be returned to the caller unchanged.
type emitError struct{ err error }

func (e emitError) Error() string { return e.err.Error() }
func (e emitError) Unwrap() error { return e.err }

// streamReader parses an OpenAI chat completions event stream
// (text/event-stream of chat.completion.chunk objects) and fills gen.
type streamReader struct {
	gen      *pipeline.Generation
	emit     func(pipeline.Delta) error
	scrubber secretScrubber
	// onRead, when set, is called after every line read (the idle timer).
	onRead func()

	dec      chunkDecoder
	data     []byte    // data of the event being read
	dataAt   time.Time // when its first data line was read
	event    string    // its event name
	done     bool      // data: [DONE] was seen
	finished bool      // a finish_reason was seen
}

// streamChunk is the part of a chat.completion.chunk the reader uses.
// Choices is nil when the key is missing or null, and empty for "[]".
type streamChunk struct {
	Choices []streamChoice  `json:"choices"`
	Usage   *wireUsage      `json:"usage"`
	Error   json.RawMessage `json:"error"`
	Timings *serverTimings  `json:"timings"`
}

type streamChoice struct {
	Delta struct {
		Content flexString `json:"content"`
		// ReasoningContent is DeepSeek's and vLLM's field, Reasoning
		// OpenRouter's and Ollama's.
		ReasoningContent flexString `json:"reasoning_content"`
		Reasoning        flexString `json:"reasoning"`
	} `json:"delta"`
	FinishReason *string `json:"finish_reason"`
}

type wireUsage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	PromptTokensDetails *struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
	CompletionTokensDetails *struct {
		ReasoningTokens int `json:"reasoning_tokens"`
	} `json:"completion_tokens_details"`
}

// serverTimings is llama.cpp's per-request timings object.
type serverTimings struct {
	PromptMS    *float64 `json:"prompt_ms"`
	PredictedMS *float64 `json:"predicted_ms"`
	QueueMS     *float64 `json:"queue_ms"`
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

var (
	fieldData  = []byte("data")
	fieldEvent = []byte("event")
	doneMarker = []byte("[DONE]")
)

// run reads the stream until [DONE], the end of the body, or an error. It
// returns emitError for emit failures, *pipeline.Error for malformed streams
// and the read error otherwise.
func (s *streamReader) run(body io.Reader) error {
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 0, 16<<10), maxLine)
	for sc.Scan() {
		if s.onRead != nil {
			s.onRead()
		}
		if err := s.line(sc.Bytes()); err != nil {
			return err
		}
		if s.done {
			return nil
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return s.badStream(fmt.Sprintf("an event-stream line is longer than %d bytes", maxLine), nil)
		}
		return err
	}
	// A last event without its blank line still counts.
	if err := s.dispatch(); err != nil {
		return err
	}
	if !s.done && !s.finished {
		return s.badStream("the stream ended before the model finished (no finish_reason and no [DONE])", nil)
	}
	return nil
}

// line handles one line of the event stream (without its line ending).
func (s *streamReader) line(l []byte) error {
	if len(l) == 0 {
		return s.dispatch()
	}
	if l[0] == ':' {
		return nil // comment or keep-alive
	}
	field, value := l, []byte(nil)
	if i := bytes.IndexByte(l, ':'); i >= 0 {
		field, value = l[:i], l[i+1:]
		if len(value) > 0 && value[0] == ' ' {
			value = value[1:]
		}
	}
	switch {
	case bytes.Equal(field, fieldData):
		if len(s.data) == 0 {
			s.dataAt = time.Now()
		} else {
			s.data = append(s.data, '\n')
		}
		s.data = append(s.data, value...)
	case bytes.Equal(field, fieldEvent):
		s.event = string(value)
	}
	return nil
}

// dispatch handles the event read so far.
func (s *streamReader) dispatch() error {
	data, event, at := s.data, s.event, s.dataAt
	s.data, s.event = s.data[:0], ""
	if len(data) == 0 {
		return nil
	}
	if bytes.Equal(data, doneMarker) {
		s.done = true
		return nil
	}
	if event == "error" {
		return s.badStream("the model provider sent an error event mid-stream: "+s.errorText(data), nil)
	}
	var c streamChunk
	if err := s.dec.decode(data, &c); err != nil {
		return s.badStream(fmt.Sprintf("a stream chunk is not valid JSON; first bytes: %q", s.scrubber.scrub(truncate(string(data), 200))), err)
	}
	if len(c.Error) > 0 && !bytes.Equal(c.Error, []byte("null")) {
		return s.badStream("the model provider reported an error mid-stream: "+s.errorText(data), nil)
	}
	if c.Usage != nil {
		u := pipeline.Usage{PromptTokens: c.Usage.PromptTokens, CompletionTokens: c.Usage.CompletionTokens}
		if c.Usage.PromptTokensDetails != nil {
			u.CachedTokens = c.Usage.PromptTokensDetails.CachedTokens
		}
		if c.Usage.CompletionTokensDetails != nil {
			u.ReasoningTokens = c.Usage.CompletionTokensDetails.ReasoningTokens
		}
		s.gen.Usage = u
	}
	if c.Timings != nil {
		s.serverTimings(c.Timings)
	}
	if c.Choices == nil && c.Usage == nil && c.Timings == nil {
		return s.badStream(fmt.Sprintf("a stream chunk has no choices; first bytes: %q", s.scrubber.scrub(truncate(string(data), 200))), nil)
	}
	for i := range c.Choices {
		ch := &c.Choices[i]
		if ch.FinishReason != nil && *ch.FinishReason != "" {
			s.finished = true
		}
		r := ch.Delta.ReasoningContent
		if r == "" {
			r = ch.Delta.Reasoning
		}
		if r != "" {
			if err := s.deliver(pipeline.Delta{Text: string(r), Reasoning: true, At: at}); err != nil {
				return err
			}
		}
		if ch.Delta.Content != "" {
			if err := s.deliver(pipeline.Delta{Text: string(ch.Delta.Content), At: at}); err != nil {
				return err
			}
		}
	}
	return nil
}

// deliver records and emits one non-empty delta.
func (s *streamReader) deliver(d pipeline.Delta) error {
	if s.gen.FirstToken.IsZero() {
		s.gen.FirstToken = d.At
	}
	s.gen.LastToken = d.At
	s.gen.Chunks++
	if err := s.emit(d); err != nil {
		return emitError{err}
	}
	return nil
}

func (s *streamReader) serverTimings(t *serverTimings) {
	if s.gen.ServerTimings == nil {
		s.gen.ServerTimings = make(map[string]float64, 3)
	}
	if t.PromptMS != nil {
		s.gen.ServerTimings["server_prefill_ms"] = *t.PromptMS
	}
	if t.PredictedMS != nil {
		s.gen.ServerTimings["server_decode_ms"] = *t.PredictedMS
	}
	if t.QueueMS != nil {
		s.gen.ServerTimings["server_queue_ms"] = *t.QueueMS
	}
}

// errorText renders an error payload found in the stream, scrubbed.
func (s *streamReader) errorText(data []byte) string {
	var env struct {
		Error json.RawMessage `json:"error"`
	}
	msg := ""
	if json.Unmarshal(data, &env) == nil && len(env.Error) > 0 {
		ue := decodeErrorObject(env.Error)
		msg = ue.Message
		if ue.Code != "" {
			msg = ue.Code + ": " + msg
		}
	} else {
		msg = parseUpstreamError(data).Message
	}
	if msg == "" {
		msg = string(data)
	}
	return s.scrubber.scrub(truncate(msg, 300))
}

// badStream builds the llm_bad_stream error for the current position.
func (s *streamReader) badStream(msg string, cause error) *pipeline.Error {
	return &pipeline.Error{
		Stage:     stageOf(s.gen),
		Code:      CodeBadStream,
		Message:   msg,
		Hint:      "the server at --llm-base-url did not send a valid OpenAI chat completions stream; check it is OpenAI-compatible and look at its logs",
		Status:    s.gen.UpstreamStatus,
		RequestID: s.gen.RequestID,
		Err:       s.scrubber.wrap(cause),
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
