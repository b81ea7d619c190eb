package openai

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"ragtime/pipeline"
	"ragtime/retrieval"
	"ragtime/upstream"
)

var _ pipeline.Embedder = (*Embedder)(nil)

// Config configures New.
type Config struct {
	// BaseURL is the API root; /embeddings is appended
	// (e.g. https://api.openai.com/v1, http://127.0.0.1:8000/v1).
	BaseURL string
	// Model is the embedding model.
	Model string
	// Dimensions asks the model for vectors of this length (models that
	// support it, such as text-embedding-3-*); 0 leaves the model's own.
	Dimensions int
	// APIKey is sent as a bearer token; KeyVar names the variable it came
	// from, for error hints.
	APIKey string
	KeyVar string
	// BatchSize bounds the texts per request (0: 64).
	BatchSize int
	// Timeout bounds each request, retries included (0: 60 s).
	Timeout time.Duration
	// Pool holds the shared keep-alive transport of the server's host;
	// nil means upstream.Default().
	Pool *upstream.Pool
}

// Embedder calls an OpenAI-compatible /embeddings endpoint. It is safe for
// concurrent use.
//
// It is a small client of its own on the upstream layer (it used to be
// langchaingo's, which reports a failure only as text and hides the
// connection it used): one POST per batch, retried when idempotently safe,
// timed with httptrace.
type Embedder struct {
	cfg    Config
	remote retrieval.RemoteEmbedder
}

// New returns an Embedder; it makes no request.
func New(cfg Config) (*Embedder, error) {
	if cfg.BaseURL == "" {
		return nil, errors.New("--embed-base-url is required for --embedder openai (e.g. https://api.openai.com/v1)")
	}
	if err := retrieval.CheckBaseURL(cfg.BaseURL); err != nil {
		return nil, err
	}
	if cfg.Model == "" {
		return nil, errors.New("--embed-model is required for --embedder openai (e.g. text-embedding-3-small)")
	}
	if cfg.Dimensions < 0 {
		return nil, fmt.Errorf("--embed-dimensions %d must not be negative", cfg.Dimensions)
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
	cfg.BaseURL = strings.TrimRight(cfg.BaseURL, "/")
	return &Embedder{cfg: cfg, remote: retrieval.RemoteEmbedder{
		Provider: "openai", BaseURL: cfg.BaseURL, Model: cfg.Model, Key: strings.TrimSpace(cfg.APIKey), KeyVar: cfg.KeyVar,
		Timeout: cfg.Timeout, HTTP: cfg.Pool.Client(cfg.BaseURL),
	}}, nil
}

// Name identifies the embedder and model, as recorded by the stores.
func (e *Embedder) Name() string { return "openai:" + e.cfg.Model }

type request struct {
	Input      []string `json:"input"`
	Model      string   `json:"model"`
	Dimensions int      `json:"dimensions,omitempty"`
}

type response struct {
	Data []struct {
		Index     int       `json:"index"`
		Embedding []float32 `json:"embedding"`
	} `json:"data"`
}

// Embed returns one vector per text, in order, in batches of BatchSize.
func (e *Embedder) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	if len(texts) == 0 {
		return nil, nil
	}
	out := make([][]float32, 0, len(texts))
	for lo := 0; lo < len(texts); lo += e.cfg.BatchSize {
		part := texts[lo:min(lo+e.cfg.BatchSize, len(texts))]
		var res response
		if err := e.remote.Post(ctx, "/embeddings", request{Input: part, Model: e.cfg.Model, Dimensions: e.cfg.Dimensions}, &res); err != nil {
			return nil, err
		}
		vecs := make([][]float32, len(res.Data))
		for i, d := range res.Data {
			vecs[i] = d.Embedding
		}
		if byIndex, ok := orderByIndex(res, len(part)); ok {
			vecs = byIndex
		}
		if err := e.remote.Check(vecs, len(part), e.cfg.Dimensions); err != nil {
			return nil, err
		}
		out = append(out, vecs...)
	}
	return out, nil
}

// orderByIndex places the vectors by their index field when every index is
// valid and unique (servers may answer out of order).
func orderByIndex(res response, n int) ([][]float32, bool) {
	if len(res.Data) != n {
		return nil, false
	}
	out := make([][]float32, n)
	for _, d := range res.Data {
		if d.Index < 0 || d.Index >= n || out[d.Index] != nil {
			return nil, false
		}
		out[d.Index] = d.Embedding
	}
	return out, true
}
