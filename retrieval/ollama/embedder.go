package ollama

import (
	"context"
	"errors"
	"strings"
	"time"

	"ragtime/internal/upstream"
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
	// Timeout bounds each request, retries included (0: 60 s).
	Timeout time.Duration
	// APIKey, when set, is sent as a bearer token (for an Ollama behind an
	// authenticating proxy); KeyVar names its variable, for error hints.
	APIKey string
	KeyVar string
	// Pool holds the shared keep-alive transport of the server's host;
	// nil means upstream.Default().
	Pool *upstream.Pool
}

// Embedder calls Ollama's /api/embed. It is safe for concurrent use.
//
// It is a small hand-written client rather than langchaingo's Ollama
// embedder because that one posts each text separately to the older
// /api/embeddings endpoint; /api/embed takes a whole batch per request.
type Embedder struct {
	cfg    Config
	remote retrieval.RemoteEmbedder
}

// New returns an Embedder; it makes no request.
func New(cfg Config) (*Embedder, error) {
	if cfg.BaseURL == "" {
		cfg.BaseURL = "http://127.0.0.1:11434"
	}
	if err := retrieval.CheckBaseURL(cfg.BaseURL); err != nil {
		return nil, err
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
	if cfg.Pool == nil {
		cfg.Pool = upstream.Default()
	}
	cfg.BaseURL = strings.TrimRight(strings.TrimSuffix(strings.TrimRight(cfg.BaseURL, "/"), "/v1"), "/")
	return &Embedder{cfg: cfg, remote: retrieval.RemoteEmbedder{
		Provider: "ollama", BaseURL: cfg.BaseURL, Model: cfg.Model, Key: strings.TrimSpace(cfg.APIKey), KeyVar: cfg.KeyVar,
		Timeout: cfg.Timeout, HTTP: cfg.Pool.Client(cfg.BaseURL),
	}}, nil
}

// Name identifies the embedder and model, as recorded by the stores.
func (e *Embedder) Name() string { return "ollama:" + e.cfg.Model }

// Embed returns one vector per text, in order, in batches of BatchSize.
func (e *Embedder) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	out := make([][]float32, 0, len(texts))
	for lo := 0; lo < len(texts); lo += e.cfg.BatchSize {
		part := texts[lo:min(lo+e.cfg.BatchSize, len(texts))]
		var res struct {
			Embeddings [][]float32 `json:"embeddings"`
		}
		if err := e.remote.Post(ctx, "/api/embed", map[string]any{"model": e.cfg.Model, "input": part}, &res); err != nil {
			return nil, err
		}
		if err := e.remote.Check(res.Embeddings, len(part), e.cfg.Dimensions); err != nil {
			return nil, err
		}
		out = append(out, res.Embeddings...)
	}
	return out, nil
}
