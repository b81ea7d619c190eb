package ollama

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"ragtime/pipeline"
	"ragtime/retrieval"
)

var _ pipeline.Embedder = (*Embedder)(nil)

// Config configures New.
type Config struct {
	// BaseURL is Ollama's root, e.g. http://127.0.0.1:11434.
	BaseURL string
	// Model is the embedding model, e.g. nomic-embed-text.
	Model string
	// Dimensions, when set, is checked against every vector returned.
	Dimensions int
	// BatchSize bounds the texts per request (0: 64).
	BatchSize int
	// Timeout bounds each request (0: 60 s).
	Timeout time.Duration
	// APIKey, when set, is sent as a bearer token (for an Ollama behind an
	// authenticating proxy); KeyVar names its variable, for error hints.
	APIKey string
	KeyVar string
}

// Embedder calls Ollama's /api/embed. It is safe for concurrent use.
//
// It is a small hand-written client rather than langchaingo's Ollama
// embedder because that one posts each text separately to the older
// /api/embeddings endpoint; /api/embed takes a whole batch per request.
type Embedder struct {
	cfg    Config
	client *http.Client
}

// New returns an Embedder; it makes no request.
func New(cfg Config) (*Embedder, error) {
	if cfg.BaseURL == "" {
		cfg.BaseURL = "http://127.0.0.1:11434"
	}
	if !strings.HasPrefix(cfg.BaseURL, "http://") && !strings.HasPrefix(cfg.BaseURL, "https://") {
		return nil, fmt.Errorf("--embed-base-url %q must start with http:// or https://", retrieval.RedactURL(cfg.BaseURL))
	}
	if cfg.Model == "" {
		return nil, errors.New("--embed-model is required for --embedder ollama (e.g. nomic-embed-text)")
	}
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = 64
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 60 * time.Second
	}
	cfg.BaseURL = strings.TrimRight(strings.TrimSuffix(strings.TrimRight(cfg.BaseURL, "/"), "/v1"), "/")
	return &Embedder{cfg: cfg, client: &http.Client{Timeout: cfg.Timeout}}, nil
}

// Name identifies the embedder and model, as recorded by the stores.
func (e *Embedder) Name() string { return "ollama:" + e.cfg.Model }

// Embed returns one vector per text, in order, in batches of BatchSize.
func (e *Embedder) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	out := make([][]float32, 0, len(texts))
	for lo := 0; lo < len(texts); lo += e.cfg.BatchSize {
		part := texts[lo:min(lo+e.cfg.BatchSize, len(texts))]
		vecs, err := e.batch(ctx, part)
		if err != nil {
			return nil, err
		}
		out = append(out, vecs...)
	}
	return out, nil
}

func (e *Embedder) fail(ctx context.Context, status int, body []byte, err error) error {
	return retrieval.ClassifyEmbedFailure(ctx, retrieval.EmbedFailure{
		Provider: "ollama", BaseURL: e.cfg.BaseURL, Model: e.cfg.Model, Status: status, Body: body, Err: err,
		KeyVar: e.cfg.KeyVar, KeySet: e.cfg.APIKey != "", Key: e.cfg.APIKey,
	})
}

func (e *Embedder) batch(ctx context.Context, texts []string) ([][]float32, error) {
	body, err := json.Marshal(map[string]any{"model": e.cfg.Model, "input": texts})
	if err != nil {
		return nil, fmt.Errorf("encoding the embed request: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.cfg.BaseURL+"/api/embed", bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("building the embed request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	if e.cfg.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+e.cfg.APIKey)
	}
	resp, err := e.client.Do(req)
	if err != nil {
		return nil, e.fail(ctx, 0, nil, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		return nil, e.fail(ctx, resp.StatusCode, b, nil)
	}
	var res struct {
		Embeddings [][]float32 `json:"embeddings"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&res); err != nil {
		if ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) {
			return nil, e.fail(ctx, 0, nil, err)
		}
		return nil, &pipeline.Error{Code: retrieval.CodeEmbedBadResponse, Err: err,
			Message: fmt.Sprintf("the ollama embedder at %s sent a response that is not /api/embed JSON: %v", retrieval.RedactURL(e.cfg.BaseURL), err)}
	}
	if len(res.Embeddings) != len(texts) {
		return nil, &pipeline.Error{Code: retrieval.CodeEmbedBadResponse,
			Message: fmt.Sprintf("the ollama embedder at %s returned %d vectors for %d texts", retrieval.RedactURL(e.cfg.BaseURL), len(res.Embeddings), len(texts))}
	}
	for i, v := range res.Embeddings {
		if len(v) == 0 || (e.cfg.Dimensions > 0 && len(v) != e.cfg.Dimensions) {
			return nil, &pipeline.Error{Code: retrieval.CodeEmbedBadResponse,
				Message: fmt.Sprintf("the ollama embedder at %s returned %d dimensions for text %d, want %d (--embed-dimensions)", retrieval.RedactURL(e.cfg.BaseURL), len(v), i, e.cfg.Dimensions),
				Hint:    "set --embed-dimensions to the model's dimension, or 0 to accept it"}
		}
	}
	return res.Embeddings, nil
}
