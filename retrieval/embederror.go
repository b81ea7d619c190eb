package retrieval

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strings"

	"ragtime/pipeline"
)

// Error codes of the remote embedders (retrieval/openai, retrieval/ollama),
// carried by *pipeline.Error.
const (
	CodeEmbedAuth          = "embed_auth"
	CodeEmbedModelNotFound = "embed_model_not_found"
	CodeEmbedUnavailable   = "embed_unavailable"
	CodeEmbedTimeout       = "embed_timeout"
	CodeEmbedBadResponse   = "embed_bad_response"
	CodeEmbedRateLimited   = "embed_rate_limited"
	CodeEmbedBadRequest    = "embed_bad_request"
)

// EmbedFailure describes a failed call to a remote embedder, for
// ClassifyEmbedFailure.
type EmbedFailure struct {
	// Provider names the technology ("openai", "ollama") and BaseURL where
	// it was called; Model is the model asked for.
	Provider, BaseURL, Model string
	// KeyVar names the variable holding the API key ("" when none is used)
	// and KeySet tells whether it was set. Key itself is only used to scrub
	// it from error text.
	KeyVar string
	KeySet bool
	Key    string
	// Status is the HTTP status (0 when no response came back) and Body
	// the start of the error body.
	Status int
	Body   []byte
	// Err is the transport error, when there was no response.
	Err error
}

// ClassifyEmbedFailure turns a failed embedding call into a *pipeline.Error
// with an embed_* code, a message naming the endpoint and a hint naming the
// flag or variable to check. The caller's own cancellation is returned as a
// plain error wrapping it.
func ClassifyEmbedFailure(ctx context.Context, f EmbedFailure) error {
	where := fmt.Sprintf("the %s embedder at %s", f.Provider, RedactURL(f.BaseURL))
	if f.Status == 0 {
		var ne net.Error
		switch {
		case ctx.Err() != nil && errors.Is(ctx.Err(), context.Canceled):
			return fmt.Errorf("embedding: %w", ctx.Err())
		case errors.Is(f.Err, context.DeadlineExceeded) || (errors.As(f.Err, &ne) && ne.Timeout()):
			return &pipeline.Error{Code: CodeEmbedTimeout, Err: f.Err,
				Message: where + " did not answer in time",
				Hint:    "check the embedding server's load, or raise --embed-timeout"}
		default:
			return &pipeline.Error{Code: CodeEmbedUnavailable, Err: f.Err,
				Message: fmt.Sprintf("%s is unreachable: %v", where, f.Err),
				Hint:    "check --embed-base-url and that the embedding server is running"}
		}
	}
	detail := scrubKey(embedErrorText(f.Body), f.Key)
	e := &pipeline.Error{Status: f.Status}
	model := strings.ToLower(detail)
	switch {
	case f.Status == 401 || f.Status == 403:
		e.Code = CodeEmbedAuth
		e.Message = fmt.Sprintf("%s rejected the API key (HTTP %d): %s", where, f.Status, detail)
		e.Hint = fmt.Sprintf("check that %s holds a key for this provider", f.KeyVar)
		if !f.KeySet {
			e.Hint = fmt.Sprintf("%s is not set; set it to this provider's API key", f.KeyVar)
		}
	case f.Status == 404 || (strings.Contains(model, "model") && (strings.Contains(model, "not found") || strings.Contains(model, "does not exist"))):
		e.Code = CodeEmbedModelNotFound
		e.Message = fmt.Sprintf("%s does not serve model %q (HTTP %d): %s", where, f.Model, f.Status, detail)
		e.Hint = "check --embed-model (and --embed-base-url: OpenAI-compatible servers usually need the /v1 suffix)"
	case f.Status == 429:
		e.Code = CodeEmbedRateLimited
		e.Message = fmt.Sprintf("%s is rate limiting (HTTP 429): %s", where, detail)
		e.Hint = "lower --embed-concurrency or --batch-size"
	case f.Status == 408 || f.Status == 504:
		e.Code = CodeEmbedTimeout
		e.Message = fmt.Sprintf("%s timed out (HTTP %d): %s", where, f.Status, detail)
		e.Hint = "retry; if it persists, lower --batch-size"
	case f.Status >= 500:
		e.Code = CodeEmbedUnavailable
		e.Message = fmt.Sprintf("%s failed (HTTP %d): %s", where, f.Status, detail)
		e.Hint = "the embedding server is failing or overloaded; retry later"
	default:
		e.Code = CodeEmbedBadRequest
		e.Message = fmt.Sprintf("%s rejected the request (HTTP %d): %s", where, f.Status, detail)
		e.Hint = "check --embed-model and --embed-dimensions (not every model accepts a dimension)"
	}
	return e
}

// keyLike matches what looks like an API key (sk-…, masked keys a provider
// echoes back such as sk-ab****wxyz, bearer credentials).
var keyLike = regexp.MustCompile(`(?i)\b(?:sk|pk|rk)-[A-Za-z0-9_*.\-]{6,}|[A-Za-z0-9_\-.]*\*{4,}[A-Za-z0-9_\-.]*|bearer\s+\S+`)

// scrubKey removes the key and anything key-like from text that came from
// the network, so it never reaches a log, the database or the stream.
func scrubKey(text, key string) string {
	text = keyLike.ReplaceAllString(text, "[redacted]")
	if k := strings.TrimSpace(key); k != "" {
		text = strings.ReplaceAll(text, k, "[redacted]")
	}
	return text
}

// embedErrorText extracts the message of an error body in the shapes
// OpenAI-compatible servers and Ollama use, bounded in length.
func embedErrorText(body []byte) string {
	var env struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
	}
	text := strings.TrimSpace(string(body))
	if json.Unmarshal(body, &env) == nil {
		var obj struct {
			Message string `json:"message"`
		}
		var s string
		switch {
		case json.Unmarshal(env.Error, &obj) == nil && obj.Message != "":
			text = obj.Message
		case json.Unmarshal(env.Error, &s) == nil && s != "":
			text = s
		case env.Message != "":
			text = env.Message
		}
	}
	if len(text) > 300 {
		text = text[:300] + "…"
	}
	if text == "" {
		text = "(no error message)"
	}
	return text
}

// RedactURL masks the password of a URL with credentials in it: the
// message it goes into reaches the stream, the query row and the logs.
func RedactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		if i := strings.LastIndexByte(raw, '@'); i >= 0 {
			return "…" + raw[i:] // unparseable: keep only what follows the credentials
		}
		return raw
	}
	return u.Redacted()
}
