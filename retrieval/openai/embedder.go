package openai

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/tmc/langchaingo/embeddings"
	lcopenai "github.com/tmc/langchaingo/llms/openai"

	"ragtime/pipeline"
	"ragtime/retrieval"
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
	// Timeout bounds each request (0: 60 s).
	Timeout time.Duration
}

// Embedder calls an OpenAI-compatible /embeddings endpoint. It is safe for
// concurrent use.
type Embedder struct {
	cfg Config
	emb *embeddings.EmbedderImpl
}

// New returns an Embedder; it makes no request.
func New(cfg Config) (*Embedder, error) {
	if cfg.BaseURL == "" {
		return nil, errors.New("--embed-base-url is required for --embedder openai (e.g. https://api.openai.com/v1)")
	}
	if !strings.HasPrefix(cfg.BaseURL, "http://") && !strings.HasPrefix(cfg.BaseURL, "https://") {
		return nil, fmt.Errorf("--embed-base-url %q must start with http:// or https://", retrieval.RedactURL(cfg.BaseURL))
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
	cfg.BaseURL = strings.TrimRight(cfg.BaseURL, "/")
	token := cfg.APIKey
	if token == "" {
		// langchaingo refuses an empty token; local servers ignore it.
		token = "none"
	}
	opts := []lcopenai.Option{
		lcopenai.WithBaseURL(cfg.BaseURL), lcopenai.WithToken(token),
		lcopenai.WithEmbeddingModel(cfg.Model), lcopenai.WithModel(cfg.Model),
		lcopenai.WithHTTPClient(&statusDoer{client: &http.Client{Timeout: cfg.Timeout}}),
	}
	if cfg.Dimensions > 0 {
		opts = append(opts, lcopenai.WithEmbeddingDimensions(cfg.Dimensions))
	}
	llm, err := lcopenai.New(opts...)
	if err != nil {
		return nil, fmt.Errorf("creating the openai embedding client: %w", err)
	}
	emb, err := embeddings.NewEmbedder(llm, embeddings.WithBatchSize(cfg.BatchSize), embeddings.WithStripNewLines(false))
	if err != nil {
		return nil, fmt.Errorf("creating the openai embedder: %w", err)
	}
	return &Embedder{cfg: cfg, emb: emb}, nil
}

// Name identifies the embedder and model, as recorded by the stores.
func (e *Embedder) Name() string { return "openai:" + e.cfg.Model }

// Embed returns one vector per text, in order.
func (e *Embedder) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	if len(texts) == 0 {
		return nil, nil
	}
	// langchaingo may rewrite the slice it is given (newline stripping,
	// batching); the contract says we must not touch the caller's.
	in := slices.Clone(texts)
	rec := &callRecord{}
	vecs, err := e.emb.EmbedDocuments(withRecord(ctx, rec), in)
	if err != nil {
		return nil, retrieval.ClassifyEmbedFailure(ctx, retrieval.EmbedFailure{
			Provider: "openai", BaseURL: e.cfg.BaseURL, Model: e.cfg.Model,
			KeyVar: e.cfg.KeyVar, KeySet: e.cfg.APIKey != "", Key: e.cfg.APIKey,
			Status: rec.status, Body: rec.body, Err: errOr(rec.err, err),
		})
	}
	if len(vecs) != len(texts) {
		return nil, &pipeline.Error{Code: retrieval.CodeEmbedBadResponse,
			Message: fmt.Sprintf("the openai embedder at %s returned %d vectors for %d texts", retrieval.RedactURL(e.cfg.BaseURL), len(vecs), len(texts))}
	}
	for i, v := range vecs {
		if len(v) == 0 || (e.cfg.Dimensions > 0 && len(v) != e.cfg.Dimensions) {
			return nil, &pipeline.Error{Code: retrieval.CodeEmbedBadResponse,
				Message: fmt.Sprintf("the openai embedder at %s returned a vector of %d dimensions for text %d, want %d (--embed-dimensions)", retrieval.RedactURL(e.cfg.BaseURL), len(v), i, e.cfg.Dimensions),
				Hint:    "set --embed-dimensions to the model's dimension, or to 0 to accept it"}
		}
	}
	return vecs, nil
}

func errOr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// callRecord keeps what langchaingo does not return: the HTTP status and
// error body of the failed request, and the transport error.
type callRecord struct {
	status int
	body   []byte
	err    error
}

type recordKey struct{}

func withRecord(ctx context.Context, r *callRecord) context.Context {
	return context.WithValue(ctx, recordKey{}, r)
}

// statusDoer is the HTTP client handed to langchaingo. langchaingo reports
// a failed call only as text ("API returned unexpected status code: 401"),
// so this records the status and error body on the request's callRecord
// and the errors can be classified exactly.
type statusDoer struct{ client *http.Client }

func (d *statusDoer) Do(req *http.Request) (*http.Response, error) {
	rec, _ := req.Context().Value(recordKey{}).(*callRecord)
	resp, err := d.client.Do(req)
	if rec == nil {
		return resp, err
	}
	if err != nil {
		rec.err = err
		return resp, err
	}
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		resp.Body.Close()
		rec.status, rec.body = resp.StatusCode, body
		resp.Body = io.NopCloser(strings.NewReader(string(body)))
	}
	return resp, nil
}
