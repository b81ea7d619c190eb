package rerank

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"ragtime"
	"ragtime/internal/upstream"
	"ragtime/pipeline"
)

var (
	_ pipeline.Reranker = (*HTTP)(nil)
	_ pipeline.Reranker = (*BM25)(nil)
)

// Request shapes of HTTP rerank APIs.
const (
	// ShapeTEI is Hugging Face text-embeddings-inference: POST /rerank
	// {"query", "texts"} answered with [{"index", "score"}].
	ShapeTEI = "tei"
	// ShapeCohere is Cohere's and Jina's: POST /v1/rerank {"model",
	// "query", "documents", "top_n"} answered with {"results": [{"index",
	// "relevance_score"}]}.
	ShapeCohere = "cohere"
)

// Error codes of the HTTP reranker, declared in package ragtime with the
// other codes.
const (
	CodeRerankAuth        = ragtime.CodeRerankAuth
	CodeRerankUnavailable = ragtime.CodeRerankUnavailable
	CodeRerankTimeout     = ragtime.CodeRerankTimeout
	CodeRerankBadResponse = ragtime.CodeRerankBadResponse
	CodeRerankRejected    = ragtime.CodeRerankRejected
)

// HTTPConfig configures NewHTTP.
type HTTPConfig struct {
	// URL is the server's root (the shape's path is appended) or the full
	// endpoint ending in /rerank.
	URL string
	// Shape is ShapeTEI or ShapeCohere.
	Shape string
	// Model is sent in the Cohere shape.
	Model string
	// APIKey is sent as a bearer token when set; KeyVar names its variable.
	APIKey string
	KeyVar string
	// Timeout bounds a call, retries included (0: 30 s).
	Timeout time.Duration
	// Pool holds the shared keep-alive transport of the server's host;
	// nil means upstream.Default().
	Pool *upstream.Pool
}

// rerankRetries is how many times a rerank call that failed for a reason
// worth retrying (no connection, 429, 502–504) is tried again: scoring is
// idempotent.
const rerankRetries = 2

// HTTP reranks through a cross-encoder served over HTTP. Each call sends
// the title and text of every candidate.
type HTTP struct {
	cfg      HTTPConfig
	endpoint string
	// shown is endpoint with any password masked, for messages (they reach
	// the stream, the query row and the logs).
	shown  string
	client *upstream.Client
	scrub  upstream.Scrubber
}

// NewHTTP returns an HTTP reranker; it makes no request.
func NewHTTP(cfg HTTPConfig) (*HTTP, error) {
	if !strings.HasPrefix(cfg.URL, "http://") && !strings.HasPrefix(cfg.URL, "https://") {
		return nil, fmt.Errorf("--rerank-url %q must be an http:// or https:// URL", upstream.RedactURL(cfg.URL))
	}
	base := strings.TrimRight(cfg.URL, "/")
	endpoint := base
	switch cfg.Shape {
	case ShapeTEI:
		if !strings.HasSuffix(base, "/rerank") {
			endpoint = base + "/rerank"
		}
	case ShapeCohere:
		if cfg.Model == "" {
			return nil, errors.New("--rerank-model is required for the cohere/jina request shape")
		}
		switch {
		case strings.HasSuffix(base, "/rerank"):
		case strings.HasSuffix(base, "/v1") || strings.HasSuffix(base, "/v2"):
			endpoint = base + "/rerank"
		default:
			endpoint = base + "/v1/rerank"
		}
	default:
		return nil, fmt.Errorf("--rerank-api must be %s or %s, got %q", ShapeTEI, ShapeCohere, cfg.Shape)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 30 * time.Second
	}
	if cfg.Pool == nil {
		cfg.Pool = upstream.Default()
	}
	return &HTTP{cfg: cfg, endpoint: endpoint, shown: upstream.RedactURL(endpoint), client: cfg.Pool.Client(endpoint),
		scrub: upstream.NewScrubber(cfg.APIKey)}, nil
}

// Name is the reranker's name in stage attrs.
func (r *HTTP) Name() string { return "http:" + r.cfg.Shape }

// Rerank implements pipeline.Reranker.
func (r *HTTP) Rerank(ctx context.Context, question string, hits []pipeline.Hit, topN int) ([]pipeline.Hit, error) {
	if len(hits) == 0 {
		return hits, nil
	}
	texts := make([]string, len(hits))
	for i, h := range hits {
		texts[i] = h.Title + "\n" + h.Text
	}
	var body any
	if r.cfg.Shape == ShapeTEI {
		body = map[string]any{"query": question, "texts": texts, "truncate": true}
	} else {
		body = map[string]any{"model": r.cfg.Model, "query": question, "documents": texts, "top_n": len(hits)}
	}
	raw, err := json.Marshal(body)
	if err != nil {
		return nil, fmt.Errorf("encoding the rerank request: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.endpoint, bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("building the rerank request: %w", r.scrub.Wrap(err))
	}
	req.Header.Set("Content-Type", "application/json")
	if r.cfg.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+r.cfg.APIKey)
	}
	tr := &upstream.Trace{}
	resp, retries, err := r.client.DoIdempotent(req, tr, rerankRetries)
	if c := pipeline.CallFrom(ctx); c != nil {
		c.Made, c.Conn, c.Retries, c.ServerWait = true, tr.Conn(), retries, tr.ServerWait()
	}
	if err != nil {
		return nil, r.transportError(ctx, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, r.statusError(resp.StatusCode, upstream.ReadErrorBody(resp.Body))
	}
	data, err := upstream.ReadLimited(resp.Body, 8<<20)
	if err != nil {
		return nil, r.transportError(ctx, err)
	}
	scores, err := r.parse(data, len(hits))
	if err != nil {
		return nil, &ragtime.Error{Kind: ragtime.KindUpstreamMalformed, Code: CodeRerankBadResponse, Err: err,
			Message: fmt.Sprintf("the reranker at %s sent an unexpected response: %v", r.shown, err),
			Hint:    "check --rerank-api (tei or cohere) against the server's API"}
	}
	return rankByScores(hits, scores, topN), nil
}

// parse returns one score per candidate, by index; every candidate must be
// scored exactly once.
func (r *HTTP) parse(data []byte, n int) ([]float64, error) {
	type result struct {
		Index          *int     `json:"index"`
		Score          *float64 `json:"score"`
		RelevanceScore *float64 `json:"relevance_score"`
	}
	var results []result
	if r.cfg.Shape == ShapeTEI {
		if err := json.Unmarshal(data, &results); err != nil {
			return nil, fmt.Errorf("want a JSON array of {index, score}: %w", err)
		}
	} else {
		var env struct {
			Results []result `json:"results"`
		}
		if err := json.Unmarshal(data, &env); err != nil {
			return nil, fmt.Errorf("want {results: [{index, relevance_score}]}: %w", err)
		}
		results = env.Results
	}
	scores := make([]float64, n)
	seen := make([]bool, n)
	for _, res := range results {
		s := res.Score
		if s == nil {
			s = res.RelevanceScore
		}
		if res.Index == nil || s == nil {
			return nil, errors.New("a result lacks its index or score")
		}
		if *res.Index < 0 || *res.Index >= n || seen[*res.Index] {
			return nil, fmt.Errorf("result index %d is out of range or repeated (%d candidates sent)", *res.Index, n)
		}
		seen[*res.Index] = true
		scores[*res.Index] = *s
	}
	for i, ok := range seen {
		if !ok {
			return nil, fmt.Errorf("candidate %d was not scored", i)
		}
	}
	return scores, nil
}

func (r *HTTP) transportError(ctx context.Context, err error) error {
	err = r.scrub.Wrap(err)
	switch upstream.TransportKind(ctx, err) {
	case ragtime.KindCancelled:
		return fmt.Errorf("reranking: %w", ctx.Err())
	case ragtime.KindTimeout:
		return &ragtime.Error{Kind: ragtime.KindTimeout, Code: CodeRerankTimeout, Err: err,
			Message: fmt.Sprintf("the reranker at %s did not answer within %s", r.shown, r.cfg.Timeout),
			Hint:    "lower top_k (fewer candidates) or check the reranker's load"}
	}
	return &ragtime.Error{Kind: ragtime.KindUpstream, Code: CodeRerankUnavailable, Err: err,
		Message: fmt.Sprintf("the reranker at %s is unreachable: %v", r.shown, err),
		Hint:    "check --rerank-url and that the reranker is running"}
}

func (r *HTTP) statusError(status int, body []byte) error {
	ue := upstream.ParseError(body)
	detail := ue.Detail(r.scrub)
	e := &ragtime.Error{Status: status, Kind: upstream.Classify(status, ue)}
	switch e.Kind {
	case ragtime.KindUpstreamAuth:
		e.Code = CodeRerankAuth
		e.Message = fmt.Sprintf("the reranker at %s rejected the API key (HTTP %d)", r.shown, status)
		e.Hint = "check " + r.cfg.KeyVar
	case ragtime.KindTimeout:
		e.Code = CodeRerankTimeout
		e.Message = fmt.Sprintf("the reranker at %s timed out (HTTP %d): %s", r.shown, status, detail)
		e.Hint = "lower top_k (fewer candidates)"
	case ragtime.KindUpstream, ragtime.KindRateLimited:
		e.Code = CodeRerankUnavailable
		e.Message = fmt.Sprintf("the reranker at %s failed (HTTP %d): %s", r.shown, status, detail)
		e.Hint = "retry later; the reranker is failing or overloaded"
	default:
		e.Code = CodeRerankRejected
		e.Message = fmt.Sprintf("the reranker at %s rejected the request (HTTP %d): %s", r.shown, status, detail)
		e.Hint = "check --rerank-url, --rerank-api and --rerank-model"
	}
	return e
}
