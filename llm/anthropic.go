package llm

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"ragtime"
	"ragtime/internal/sse"
	"ragtime/internal/upstream"
	"ragtime/pipeline"
)

// Anthropic is a pipeline.Generator for Anthropic's Messages API
// (POST /v1/messages with stream: true). Thinking arrives as reasoning
// deltas; cache reads and writes are reported in the usage. It is safe for
// concurrent use.
type Anthropic struct{ *client }

// ProviderAnthropic is the Generation.Provider of the Anthropic generator.
const ProviderAnthropic = "anthropic"

// Anthropic's defaults.
const (
	// AnthropicBaseURL is the default --llm-base-url of the anthropic provider.
	AnthropicBaseURL = "https://api.anthropic.com/v1"
	// AnthropicVersion is the anthropic-version header sent.
	AnthropicVersion = "2023-06-01"
	// anthropicMaxTokens is sent when the request sets no max_tokens, which
	// the Messages API requires.
	anthropicMaxTokens = 1024
)

// NewAnthropic checks cfg and returns a generator with its own keep-alive
// connection pool. An empty BaseURL means AnthropicBaseURL.
func NewAnthropic(cfg Config) (*Anthropic, error) {
	c, err := newClient(cfg, anthropicDialect{}, AnthropicBaseURL)
	if err != nil {
		return nil, err
	}
	return &Anthropic{c}, nil
}

type anthropicDialect struct{}

func (anthropicDialect) provider() string   { return ProviderAnthropic }
func (anthropicDialect) chatPath() string   { return "/messages" }
func (anthropicDialect) modelsPath() string { return "/models" }

type anthropicRequest struct {
	Model     string `json:"model"`
	MaxTokens int    `json:"max_tokens"`
	// Temperature is Anthropic's 0–1; a higher value is refused upstream.
	Temperature *float64 `json:"temperature,omitempty"`
	// StopSequences is the request's stop; the Messages API takes no seed.
	StopSequences []string           `json:"stop_sequences,omitempty"`
	System        string             `json:"system,omitempty"`
	Messages      []pipeline.Message `json:"messages"`
	Stream        bool               `json:"stream"`
}

// body moves system messages into the top-level system field, as the
// Messages API wants them.
func (anthropicDialect) body(model string, req *pipeline.GenerateRequest) any {
	body := anthropicRequest{Model: model, MaxTokens: req.MaxTokens, Temperature: req.Temperature, StopSequences: req.Stop, Stream: true}
	if body.MaxTokens <= 0 {
		body.MaxTokens = anthropicMaxTokens
	}
	var system []string
	for _, m := range messagesOf(req) {
		if m.Role == "system" {
			system = append(system, m.Content)
			continue
		}
		body.Messages = append(body.Messages, m)
	}
	body.System = strings.Join(system, "\n\n")
	return body
}

func (anthropicDialect) authorize(h http.Header, key string) {
	h.Set("Accept", "text/event-stream")
	h.Set("Anthropic-Version", AnthropicVersion)
	if key != "" {
		h.Set("X-Api-Key", key)
	}
}

func (anthropicDialect) streamType(ct string) bool { return isEventStream(ct) }

func (anthropicDialect) newStream(gen *pipeline.Generation, emit func(pipeline.Delta) error, sc upstream.Scrubber) stream {
	return &anthropicStream{d: deliverer{gen, emit}, scrubber: sc}
}

func (anthropicDialect) models(body []byte) ([]string, error) { return decodeModelIDs(body) }

// anthropicStream parses the Messages API event stream: message_start
// (usage with cache tokens), content_block_delta (text_delta, thinking_delta),
// message_delta (output tokens, stop reason), message_stop, ping, error.
type anthropicStream struct {
	d        deliverer
	scrubber upstream.Scrubber
	dec      chunkDecoder
	framer   sse.Reader
	stopped  bool // message_stop was seen
}

type anthropicEvent struct {
	Type    string `json:"type"`
	Message *struct {
		Model string          `json:"model"`
		Usage *anthropicUsage `json:"usage"`
	} `json:"message"`
	Delta struct {
		Type       string     `json:"type"`
		Text       flexString `json:"text"`
		Thinking   flexString `json:"thinking"`
		StopReason string     `json:"stop_reason"`
	} `json:"delta"`
	Usage *anthropicUsage `json:"usage"`
	Error *struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"error"`
}

type anthropicUsage struct {
	InputTokens              *int `json:"input_tokens"`
	OutputTokens             *int `json:"output_tokens"`
	CacheCreationInputTokens *int `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     *int `json:"cache_read_input_tokens"`
}

func (s *anthropicStream) ended() bool { return s.stopped }

func (s *anthropicStream) run(body io.Reader) error {
	s.framer.Handle, s.framer.Clock = s.dispatch, clockOf(body)
	s.framer.TooLong = func() error {
		return s.bad(fmt.Sprintf("an event-stream line is longer than %d bytes", maxLine), nil)
	}
	if _, err := s.framer.Run(body); err != nil {
		return err
	}
	if !s.stopped {
		return s.bad("the stream ended before the model finished (no message_stop)", nil)
	}
	return nil
}

func (s *anthropicStream) bad(msg string, cause error) *ragtime.Error {
	return badStream(s.d.gen, s.scrubber, "Anthropic Messages stream", msg, cause)
}

func (s *anthropicStream) dispatch(event string, data []byte, at time.Time) (bool, error) {
	var ev anthropicEvent
	if err := s.dec.decode(data, &ev); err != nil {
		return false, s.bad(fmt.Sprintf("a stream event is not valid JSON; first bytes: %q", s.scrubber.Scrub(upstream.Truncate(string(data), 200))), err)
	}
	if ev.Type == "" {
		ev.Type = event
	}
	switch ev.Type {
	case "message_start":
		if ev.Message != nil && ev.Message.Usage != nil {
			s.usage(ev.Message.Usage)
		}
	case "content_block_delta":
		switch {
		case ev.Delta.Type == "thinking_delta" && ev.Delta.Thinking != "":
			return false, s.d.deliver(pipeline.Delta{Text: string(ev.Delta.Thinking), Reasoning: true, At: at})
		case ev.Delta.Type == "text_delta" && ev.Delta.Text != "":
			return false, s.d.deliver(pipeline.Delta{Text: string(ev.Delta.Text), At: at})
		}
	case "message_delta":
		if ev.Usage != nil {
			s.usage(ev.Usage)
		}
		if ev.Delta.StopReason != "" {
			s.d.gen.FinishReason = ev.Delta.StopReason
		}
	case "message_stop":
		s.stopped = true
		return true, nil
	case "error":
		return false, s.midStreamError(data, ev)
	case "ping", "content_block_start", "content_block_stop":
	default:
		// New event types are to be ignored, says Anthropic's versioning
		// policy; an event with no type at all is not this API.
		if ev.Type == "" {
			return false, s.bad(fmt.Sprintf("a stream event has no type; first bytes: %q", s.scrubber.Scrub(upstream.Truncate(string(data), 200))), nil)
		}
	}
	return false, nil
}

// usage folds a usage object in: message_start carries the input side,
// message_delta the (cumulative) output tokens. Anthropic's input_tokens
// exclude the cached ones, so the prompt is their sum.
func (s *anthropicStream) usage(u *anthropicUsage) {
	g := &s.d.gen.Usage
	in, read, write := 0, 0, 0
	if u.InputTokens != nil {
		in = *u.InputTokens
	}
	if u.CacheReadInputTokens != nil {
		read = *u.CacheReadInputTokens
		g.CachedTokens = &read
	}
	if u.CacheCreationInputTokens != nil {
		write = *u.CacheCreationInputTokens
		g.CacheCreationTokens = write
	}
	if u.InputTokens != nil || u.CacheReadInputTokens != nil || u.CacheCreationInputTokens != nil {
		g.PromptTokens = in + g.CacheCreationTokens
		if g.CachedTokens != nil {
			g.PromptTokens += *g.CachedTokens
		}
	}
	if u.OutputTokens != nil {
		g.CompletionTokens = *u.OutputTokens
	}
}

// midStreamError classifies an error event: overloaded and API errors are
// the provider failing, rate limits are rate limits, the rest a bad stream.
func (s *anthropicStream) midStreamError(data []byte, ev anthropicEvent) *ragtime.Error {
	e := s.bad("the model provider sent an error event mid-stream: "+errorText(s.scrubber, data), nil)
	if ev.Error == nil {
		return e
	}
	switch ev.Error.Type {
	case "overloaded_error", "api_error":
		e.Kind, e.Code = ragtime.KindUpstream, CodeUnavailable
		e.Hint = "Anthropic is overloaded or failing; retry later or check its status page"
	case "rate_limit_error":
		e.Kind, e.Code = ragtime.KindRateLimited, CodeRateLimited
		e.Hint = "send fewer concurrent requests or raise the rate limit"
	}
	return e
}
