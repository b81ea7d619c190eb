package llm

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"time"

	"ragtime"
	"ragtime/internal/sse"
	"ragtime/internal/upstream"
	"ragtime/pipeline"
)

// Ollama is a pipeline.Generator for Ollama's native chat API
// (POST /api/chat, newline-delimited JSON). Unlike Ollama's /v1, its final
// chunk carries the server's own timings (model load, prompt evaluation,
// generation), which become server_load_ms, server_prefill_ms and
// server_decode_ms. It is safe for concurrent use.
type Ollama struct{ *client }

// ProviderOllama is the Generation.Provider of the Ollama generator.
const ProviderOllama = "ollama"

// OllamaBaseURL is the default --llm-base-url of the ollama provider.
const OllamaBaseURL = "http://127.0.0.1:11434"

// NewOllama checks cfg and returns a generator with its own keep-alive
// connection pool. An empty BaseURL means OllamaBaseURL; a base URL ending
// in /api or /v1 is taken to mean the server root.
func NewOllama(cfg Config) (*Ollama, error) {
	c, err := newClient(cfg, ollamaDialect{}, OllamaBaseURL)
	if err != nil {
		return nil, err
	}
	for _, suffix := range []string{"/api", "/v1"} {
		if len(c.base) > len(suffix) && c.base[len(c.base)-len(suffix):] == suffix {
			c.base = c.base[:len(c.base)-len(suffix)]
		}
	}
	return &Ollama{c}, nil
}

type ollamaDialect struct{}

func (ollamaDialect) provider() string   { return ProviderOllama }
func (ollamaDialect) chatPath() string   { return "/api/chat" }
func (ollamaDialect) modelsPath() string { return "/api/tags" }

type ollamaRequest struct {
	Model    string             `json:"model"`
	Messages []pipeline.Message `json:"messages"`
	Stream   bool               `json:"stream"`
	Options  *ollamaOptions     `json:"options,omitempty"`
}

type ollamaOptions struct {
	NumPredict  int      `json:"num_predict,omitempty"`
	Temperature *float64 `json:"temperature,omitempty"`
	Stop        []string `json:"stop,omitempty"`
	Seed        *int64   `json:"seed,omitempty"`
}

func (ollamaDialect) body(model string, req *pipeline.GenerateRequest) any {
	body := ollamaRequest{Model: model, Messages: messagesOf(req), Stream: true}
	if req.MaxTokens > 0 || req.Temperature != nil || len(req.Stop) > 0 || req.Seed != nil {
		body.Options = &ollamaOptions{NumPredict: max(req.MaxTokens, 0), Temperature: req.Temperature, Stop: req.Stop, Seed: req.Seed}
	}
	return body
}

func (ollamaDialect) authorize(h http.Header, key string) {
	h.Set("Accept", "application/x-ndjson")
	if key != "" {
		h.Set("Authorization", "Bearer "+key) // Ollama's hosted API; a local server needs none
	}
}

// streamType accepts NDJSON and, as some Ollama versions and proxies label
// it, JSON.
func (ollamaDialect) streamType(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && (mt == "application/x-ndjson" || mt == "application/json")
}

func (ollamaDialect) newStream(gen *pipeline.Generation, emit func(pipeline.Delta) error, sc upstream.Scrubber) stream {
	return &ollamaStream{d: deliverer{gen, emit}, scrubber: sc}
}

func (ollamaDialect) models(body []byte) ([]string, error) {
	var tags struct {
		Models []struct {
			Name  string `json:"name"`
			Model string `json:"model"`
		} `json:"models"`
	}
	if err := json.Unmarshal(body, &tags); err != nil {
		return nil, fmt.Errorf("the model tags are not JSON: %w", err)
	}
	if tags.Models == nil {
		return nil, errors.New(`the model tags have no "models" array`)
	}
	ids := make([]string, 0, len(tags.Models))
	for _, m := range tags.Models {
		if m.Name != "" {
			ids = append(ids, m.Name)
		} else {
			ids = append(ids, m.Model)
		}
	}
	return ids, nil
}

// ollamaStream parses /api/chat's NDJSON: one object per line, the last
// with done: true and the durations (nanoseconds).
type ollamaStream struct {
	d        deliverer
	scrubber upstream.Scrubber
	dec      chunkDecoder
	done     bool
}

type ollamaChunk struct {
	Message *struct {
		Content  flexString `json:"content"`
		Thinking flexString `json:"thinking"`
	} `json:"message"`
	Done                  bool   `json:"done"`
	DoneReason            string `json:"done_reason"`
	Error                 string `json:"error"`
	LoadDuration          *int64 `json:"load_duration"`
	PromptEvalCount       *int   `json:"prompt_eval_count"`
	PromptEvalDuration    *int64 `json:"prompt_eval_duration"`
	PromptEvalCachedCount *int   `json:"prompt_eval_cached_count"`
	EvalCount             *int   `json:"eval_count"`
	EvalDuration          *int64 `json:"eval_duration"`
}

func (s *ollamaStream) ended() bool { return s.done }

func (s *ollamaStream) bad(msg string, cause error) *ragtime.Error {
	return badStream(s.d.gen, s.scrubber, "Ollama /api/chat stream (NDJSON)", msg, cause)
}

func (s *ollamaStream) run(body io.Reader) error {
	sc := sse.NewLineScanner(body, maxLine)
	clock := clockOf(body)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		if err := s.line(line, clock()); err != nil {
			return err
		}
		if s.done {
			return nil
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return s.bad(fmt.Sprintf("a stream line is longer than %d bytes", maxLine), nil)
		}
		return err
	}
	return s.bad("the stream ended before the model finished (no chunk with done: true)", nil)
}

func (s *ollamaStream) line(line []byte, at time.Time) error {
	var c ollamaChunk
	if err := s.dec.decode(line, &c); err != nil {
		return s.bad(fmt.Sprintf("a stream line is not valid JSON; first bytes: %q", s.scrubber.Scrub(upstream.Truncate(string(line), 200))), err)
	}
	if c.Error != "" {
		return s.bad("the model provider reported an error mid-stream: "+s.scrubber.Scrub(upstream.Truncate(c.Error, 300)), nil)
	}
	if c.Message == nil && !c.Done {
		return s.bad(fmt.Sprintf("a stream line has no message; first bytes: %q", s.scrubber.Scrub(upstream.Truncate(string(line), 200))), nil)
	}
	if c.Message != nil {
		if c.Message.Thinking != "" {
			if err := s.d.deliver(pipeline.Delta{Text: string(c.Message.Thinking), Reasoning: true, At: at}); err != nil {
				return err
			}
		}
		if c.Message.Content != "" {
			if err := s.d.deliver(pipeline.Delta{Text: string(c.Message.Content), At: at}); err != nil {
				return err
			}
		}
	}
	if !c.Done {
		return nil
	}
	s.done = true
	gen := s.d.gen
	gen.FinishReason = c.DoneReason
	ns := func(key string, v *int64) {
		if v != nil {
			setTiming(gen, key, float64(*v)/1e6)
		}
	}
	ns(ragtime.ServerLoadMs, c.LoadDuration)
	ns(ragtime.ServerPrefillMs, c.PromptEvalDuration)
	ns(ragtime.ServerDecodeMs, c.EvalDuration)
	if c.PromptEvalCachedCount != nil { // most versions send none: unknown
		cached := *c.PromptEvalCachedCount
		gen.Usage.CachedTokens = &cached
	}
	if c.PromptEvalCount != nil {
		gen.Usage.PromptTokens = *c.PromptEvalCount
	}
	if c.EvalCount != nil {
		gen.Usage.CompletionTokens = *c.EvalCount
	}
	return nil
}
