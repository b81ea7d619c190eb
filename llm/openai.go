package llm

import (
	"mime"
	"net/http"

	"ragtime/internal/openaiwire"
	"ragtime/internal/upstream"
	"ragtime/pipeline"
)

// Why a thin client of our own rather than langchaingo's OpenAI client: a
// source reading of langchaingo v0.1.14 found that its streaming callback is
// also called with empty chunks (role-only and finish deltas), that a context
// cancelled mid-stream can come back as partial content with a nil error, and
// that HTTP status codes are only available inside error strings. The TTFT
// breakdown needs the exact moment of the first non-empty delta, a cancelled
// answer must never look like a complete one, and errors must be classified
// by status, so this package speaks the wire format itself.

// OpenAI is a pipeline.Generator for any OpenAI-compatible chat completions
// endpoint (OpenAI, TaoToken, DeepSeek, Groq, vLLM, llama.cpp, Ollama's /v1,
// the ragtime simulator). It streams with stream_options.include_usage and
// times each call with net/http/httptrace. It is safe for concurrent use.
type OpenAI struct{ *client }

// ProviderOpenAI is the Generation.Provider of the OpenAI generator.
const ProviderOpenAI = "openai"

// NewOpenAI checks cfg and returns a generator with its own keep-alive
// connection pool (unless cfg.HTTPClient is set).
func NewOpenAI(cfg Config) (*OpenAI, error) {
	c, err := newClient(cfg, openaiDialect{}, "")
	if err != nil {
		return nil, err
	}
	return &OpenAI{c}, nil
}

// openaiDialect speaks OpenAI's chat completions streaming format.
type openaiDialect struct{}

func (openaiDialect) provider() string   { return ProviderOpenAI }
func (openaiDialect) chatPath() string   { return "/chat/completions" }
func (openaiDialect) modelsPath() string { return "/models" }

func (openaiDialect) body(model string, req *pipeline.GenerateRequest) any {
	msgs := messagesOf(req)
	body := openaiwire.ChatRequest{
		Model:         model,
		Messages:      make([]openaiwire.Message, len(msgs)),
		Temperature:   req.Temperature,
		Stop:          req.Stop,
		Seed:          req.Seed,
		Stream:        true,
		StreamOptions: &openaiwire.StreamOptions{IncludeUsage: true},
	}
	for i, m := range msgs {
		body.Messages[i] = openaiwire.Message{Role: m.Role, Content: openaiwire.Content(m.Content)}
	}
	if req.MaxTokens > 0 {
		body.MaxTokens = &req.MaxTokens
	}
	return body
}

// messagesOf is the prompt, or the bare question when there is none.
func messagesOf(req *pipeline.GenerateRequest) []pipeline.Message {
	if len(req.Messages) == 0 {
		return []pipeline.Message{{Role: "user", Content: req.Question}}
	}
	return req.Messages
}

func (openaiDialect) authorize(h http.Header, key string) {
	h.Set("Accept", "text/event-stream")
	if key != "" {
		h.Set("Authorization", "Bearer "+key)
	}
}

func (openaiDialect) streamType(ct string) bool { return isEventStream(ct) }

func (openaiDialect) newStream(gen *pipeline.Generation, emit func(pipeline.Delta) error, sc upstream.Scrubber) stream {
	return &streamReader{gen: gen, emit: emit, scrubber: sc}
}

func (openaiDialect) models(body []byte) ([]string, error) { return decodeModelIDs(body) }

// isEventStream reports whether a Content-Type is text/event-stream.
func isEventStream(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && mt == "text/event-stream"
}

// ended reports whether [DONE] was seen.
func (s *streamReader) ended() bool { return s.done }
