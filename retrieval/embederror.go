package retrieval

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"ragtime"
	"ragtime/internal/upstream"
	"ragtime/pipeline"
)

// Error codes of the remote embedders (retrieval/openai, retrieval/ollama),
// carried by *ragtime.Error, declared in package ragtime with the other
// codes.
const (
	CodeEmbedAuth          = ragtime.CodeEmbedAuth
	CodeEmbedModelNotFound = ragtime.CodeEmbedModelNotFound
	CodeEmbedUnavailable   = ragtime.CodeEmbedUnavailable
	CodeEmbedTimeout       = ragtime.CodeEmbedTimeout
	CodeEmbedBadResponse   = ragtime.CodeEmbedBadResponse
	CodeEmbedRateLimited   = ragtime.CodeEmbedRateLimited
	CodeEmbedBadRequest    = ragtime.CodeEmbedBadRequest
)

// EmbedRetries is how many times a remote embedding call that failed for a
// reason worth retrying (no connection, 429, 502–504) is tried again.
const EmbedRetries = 2

// maxEmbedResponse bounds an embeddings response (64 texts of 3,072
// dimensions as JSON are about 4 MB).
const maxEmbedResponse = 64 << 20

// bodies holds response buffers between calls: a question's embedding is a
// few KB read per ask (its server may not announce the size), and out is
// decoded from it into values of its own (DecodeBody and encoding/json
// copy), so the buffer is free again once Post returns.
var bodies = sync.Pool{New: func() any { return new([]byte) }}

// maxPooledBody bounds the buffers kept in bodies: a batch of ingest
// texts' vectors is not kept for the next question's.
const maxPooledBody = 256 << 10

// RemoteEmbedder is what the remote embedders (retrieval/openai,
// retrieval/ollama) share: the HTTP call through the upstream layer, its
// retries and timing, and the classification of failures.
type RemoteEmbedder struct {
	// Provider names the technology ("openai", "ollama") and BaseURL where
	// it is called; Model is the model asked for.
	Provider, BaseURL, Model string
	// Key is sent as a bearer token when set; KeyVar names its variable,
	// for hints.
	Key, KeyVar string
	// Timeout bounds each request, retries included.
	Timeout time.Duration
	// HTTP is the upstream client of BaseURL's host.
	HTTP *upstream.Client
}

// Where names the endpoint in messages, with any password masked.
func (r *RemoteEmbedder) Where() string {
	return fmt.Sprintf("the %s embedder at %s", r.Provider, upstream.RedactURL(r.BaseURL))
}

// BodyDecoder is an out of Post that decodes the response body itself
// rather than through encoding/json. body is Post's to reuse once
// DecodeBody returns: what out keeps must be copied from it.
type BodyDecoder interface {
	DecodeBody(body []byte) error
}

// Post sends payload as JSON to BaseURL+path and decodes the answer into
// out (with its DecodeBody when it is a BodyDecoder). Failures are *ragtime.Error with an embed_* code, except the
// caller's own cancellation, returned as a plain error wrapping it. The
// connection and retries are reported to the pipeline.Call in ctx.
func (r *RemoteEmbedder) Post(ctx context.Context, path string, payload, out any) error {
	body, err := json.Marshal(payload)
	if err != nil {
		return fmt.Errorf("encoding the embed request: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, r.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.BaseURL+path, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("building the embed request to %s: %w", r.Where(), upstream.NewScrubber(r.Key).Wrap(err))
	}
	req.Header.Set("Content-Type", "application/json")
	if r.Key != "" {
		req.Header.Set("Authorization", "Bearer "+r.Key)
	}
	tr := &upstream.Trace{}
	resp, retries, err := r.HTTP.DoIdempotent(req, tr, EmbedRetries)
	if c := pipeline.CallFrom(ctx); c != nil {
		c.Made, c.Conn, c.Retries, c.ServerWait = true, tr.Conn(), retries, tr.ServerWait()
	}
	if err != nil {
		return r.failure(ctx, 0, nil, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return r.failure(ctx, resp.StatusCode, upstream.ReadErrorBody(resp.Body), nil)
	}
	buf := bodies.Get().(*[]byte)
	data, err := upstream.ReadLimitedTo(*buf, resp.Body, maxEmbedResponse)
	defer func() {
		if cap(data) <= maxPooledBody {
			*buf = data[:0]
			bodies.Put(buf)
		}
	}()
	if err != nil && !errors.Is(err, upstream.ErrTooLarge) {
		return r.failure(ctx, 0, nil, err)
	}
	if d, ok := out.(BodyDecoder); ok && err == nil {
		err = d.DecodeBody(data)
	} else if err == nil {
		err = json.Unmarshal(data, out)
	}
	if err != nil {
		return &ragtime.Error{Kind: ragtime.KindUpstreamMalformed, Code: CodeEmbedBadResponse, Err: err,
			Message: fmt.Sprintf("%s sent a response that is not %s embeddings JSON: %v", r.Where(), r.Provider, err)}
	}
	return nil
}

// Check verifies one vector per text came back, each of dims dimensions
// (any non-zero length when dims is 0).
func (r *RemoteEmbedder) Check(vecs [][]float32, texts, dims int) error {
	if len(vecs) != texts {
		return &ragtime.Error{Kind: ragtime.KindUpstreamMalformed, Code: CodeEmbedBadResponse,
			Message: fmt.Sprintf("%s returned %d vectors for %d texts", r.Where(), len(vecs), texts)}
	}
	for i, v := range vecs {
		if len(v) == 0 || (dims > 0 && len(v) != dims) {
			return &ragtime.Error{Kind: ragtime.KindUpstreamMalformed, Code: CodeEmbedBadResponse,
				Message: fmt.Sprintf("%s returned a vector of %d dimensions for text %d, want %d (--embed-dimensions)", r.Where(), len(v), i, dims),
				Hint:    "set --embed-dimensions to the model's dimension, or to 0 to accept it"}
		}
	}
	return nil
}

// failure turns a failed call into a *ragtime.Error with an embed_* code,
// a message naming the endpoint and a hint naming the flag or variable to
// check.
func (r *RemoteEmbedder) failure(ctx context.Context, status int, body []byte, err error) error {
	where := r.Where()
	sc := upstream.NewScrubber(r.Key)
	if status == 0 {
		switch upstream.TransportKind(ctx, err) {
		case ragtime.KindCancelled:
			return fmt.Errorf("embedding: %w", ctx.Err())
		case ragtime.KindTimeout:
			return &ragtime.Error{Kind: ragtime.KindTimeout, Code: CodeEmbedTimeout, Err: sc.Wrap(err),
				Message: where + " did not answer in time",
				Hint:    "check the embedding server's load, or raise --embed-timeout"}
		}
		return &ragtime.Error{Kind: ragtime.KindUpstream, Code: CodeEmbedUnavailable, Err: sc.Wrap(err),
			Message: fmt.Sprintf("%s is unreachable: %v", where, sc.Wrap(err)),
			Hint:    "check --embed-base-url and that the embedding server is running"}
	}
	ue := upstream.ParseError(body)
	detail := ue.Detail(sc)
	e := &ragtime.Error{Status: status, Kind: upstream.Classify(status, ue)}
	switch e.Kind {
	case ragtime.KindUpstreamAuth:
		e.Code = CodeEmbedAuth
		e.Message = fmt.Sprintf("%s rejected the API key (HTTP %d): %s", where, status, detail)
		e.Hint = fmt.Sprintf("check that %s holds a key for this provider", r.KeyVar)
		if r.Key == "" {
			e.Hint = fmt.Sprintf("%s is not set; set it to this provider's API key", r.KeyVar)
		}
	case ragtime.KindUpstreamNotFound:
		e.Code = CodeEmbedModelNotFound
		e.Message = fmt.Sprintf("%s does not serve model %q (HTTP %d): %s", where, r.Model, status, detail)
		e.Hint = "check --embed-model (and --embed-base-url: OpenAI-compatible servers usually need the /v1 suffix)"
	case ragtime.KindRateLimited:
		e.Code = CodeEmbedRateLimited
		e.Message = fmt.Sprintf("%s is rate limiting (HTTP 429): %s", where, detail)
		e.Hint = "lower --embed-concurrency or --batch-size"
	case ragtime.KindTimeout:
		e.Code = CodeEmbedTimeout
		e.Message = fmt.Sprintf("%s timed out (HTTP %d): %s", where, status, detail)
		e.Hint = "retry; if it persists, lower --batch-size"
	case ragtime.KindUpstream:
		e.Code = CodeEmbedUnavailable
		e.Message = fmt.Sprintf("%s failed (HTTP %d): %s", where, status, detail)
		e.Hint = "the embedding server is failing or overloaded; retry later"
	default:
		e.Code = CodeEmbedBadRequest
		e.Message = fmt.Sprintf("%s rejected the request (HTTP %d): %s", where, status, detail)
		e.Hint = "check --embed-model and --embed-dimensions (not every model accepts a dimension)"
	}
	return e
}

// CheckBaseURL checks an --embed-base-url: an http(s) URL with a host.
func CheckBaseURL(raw string) error {
	if !strings.HasPrefix(raw, "http://") && !strings.HasPrefix(raw, "https://") {
		return fmt.Errorf("--embed-base-url %q must start with http:// or https://", upstream.RedactURL(raw))
	}
	return nil
}
