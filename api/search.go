package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"ragtime"
	"ragtime/pipeline"
)

// Retriever runs a question's retrieval alone (POST /v1/search);
// *pipeline.Pipeline implements it.
type Retriever interface {
	Search(ctx context.Context, req *pipeline.Request) (*pipeline.SearchResult, error)
}

// retrievalKnobs are the retrieval settings every ask may give: in
// POST /ask's and /v1/search's bodies and the chat door's ragtime object
// (GET /ask has them as parameters). The leg depths not given are
// pipeline.Unset: a body decodes into knobs that start so (unset), and
// encoding/json leaves what the body does not name as it is.
type retrievalKnobs struct {
	Retrieval string `json:"retrieval"`
	VectorK   int    `json:"vector_k"`
	LexicalK  int    `json:"lexical_k"`
	Collapse  string `json:"collapse"`
}

// unsetRetrieval is retrievalKnobs with nothing given.
func unsetRetrieval() retrievalKnobs {
	return retrievalKnobs{VectorK: pipeline.Unset, LexicalK: pipeline.Unset}
}

// apply checks the leg depths given and sets them, and the mode, in req
// (the mode is checked with the rest of req).
func (k retrievalKnobs) apply(req *pipeline.Request) error {
	req.Retrieval, req.Collapse = k.Retrieval, k.Collapse
	for _, f := range []struct {
		name string
		v    int
		dst  *int
	}{{"vector_k", k.VectorK, &req.VectorK}, {"lexical_k", k.LexicalK, &req.LexicalK}} {
		// A given 0 is refused here: the request's own rule takes 0 as the
		// default (pipeline.Request.VectorK).
		if f.v != pipeline.Unset {
			if err := pipeline.CheckLegK(f.name, f.v); err != nil {
				return err
			}
		}
		*f.dst = f.v
	}
	return nil
}

// answerKnobs are the knobs of an ask that answers, in POST /ask's body and
// the chat door's ragtime object; those not given are pipeline.Unset (as in
// retrievalKnobs).
type answerKnobs struct {
	TopK       int `json:"top_k"`
	RerankTopN int `json:"rerank_top_n"`
	retrievalKnobs
	// TTFTBudgetMs and MinChunks are the ask's TTFT budget (pipeline.Request).
	TTFTBudgetMs int `json:"ttft_budget_ms"`
	MinChunks    int `json:"min_chunks"`
}

// unsetAnswer is answerKnobs with nothing given.
func unsetAnswer() answerKnobs {
	return answerKnobs{TopK: pipeline.Unset, RerankTopN: pipeline.Unset, retrievalKnobs: unsetRetrieval(),
		TTFTBudgetMs: pipeline.Unset, MinChunks: pipeline.Unset}
}

// apply sets the knobs in req, checking the leg depths given.
func (k answerKnobs) apply(req *pipeline.Request) error {
	req.TopK, req.RerankTopN, req.TTFTBudgetMs, req.MinChunks = k.TopK, k.RerankTopN, k.TTFTBudgetMs, k.MinChunks
	return k.retrievalKnobs.apply(req)
}

// searchBody is the POST /v1/search JSON body; the integer knobs not given
// are pipeline.Unset (retrievalKnobs), the others' pointers tell absent
// from zero.
type searchBody struct {
	Query *string `json:"query"`
	TopK  int     `json:"top_k"`
	retrievalKnobs
	Rerank     *bool            `json:"rerank"`
	RerankTopN int              `json:"rerank_top_n"`
	Filter     *pipeline.Filter `json:"filter"`
}

const searchFields = "query, top_k, retrieval, vector_k, lexical_k, collapse, rerank, rerank_top_n, filter"

// searchResult is one chunk of a /v1/search answer.
type searchResult struct {
	Rank    int     `json:"rank"`
	ChunkID string  `json:"chunk_id"`
	DocID   string  `json:"doc_id"`
	Title   string  `json:"title"`
	Text    string  `json:"text"`
	Score   float64 `json:"score"`
	pipeline.Legs
	RerankScore *float64 `json:"rerank_score"`
}

// searchAnswer is the POST /v1/search answer (docs/api.md).
type searchAnswer struct {
	QueryID     string         `json:"query_id"`
	Retrieval   string         `json:"retrieval"`
	Results     []searchResult `json:"results"`
	Stages      []ragtime.Span `json:"stages"`
	RetrievalMs float64        `json:"retrieval_ms"`
}

// handleSearch serves POST /v1/search: the retrieval of an ask without
// its generation, with the same keys, scopes, tenant filters and limits.
func (s *server) handleSearch(c echo.Context) error {
	if s.deps.Retriever == nil {
		return &apiError{Status: http.StatusNotImplemented, Code: "search_unavailable", Message: "this server does not serve retrieval-only queries"}
	}
	r := c.Request()
	if ct := r.Header.Get(echo.HeaderContentType); ct != "" && !strings.HasPrefix(ct, echo.MIMEApplicationJSON) {
		return &apiError{Status: http.StatusUnsupportedMediaType, Code: "unsupported_media_type",
			Message: "POST /v1/search takes a JSON body (Content-Type: application/json), got " + ct}
	}
	dec := json.NewDecoder(http.MaxBytesReader(c.Response(), r.Body, s.deps.MaxBodyBytes))
	dec.DisallowUnknownFields()
	body := searchBody{TopK: pipeline.Unset, retrievalKnobs: unsetRetrieval(), RerankTopN: pipeline.Unset}
	if err := dec.Decode(&body); err != nil {
		if field, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			field = strings.Trim(field, `"`)
			return badRequest(nameOf(field), "unknown_field", fmt.Sprintf("unknown field %q; known: %s", field, searchFields))
		}
		if errors.Is(err, io.EOF) {
			return badRequest("query", "query_required", `the body is empty; send {"query": "..."}`)
		}
		return bodyError(err, s.deps.MaxBodyBytes)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return badRequest("", "body_invalid", "the body must hold exactly one JSON object")
	}
	req := pipeline.Request{TopK: body.TopK, RerankTopN: 0, MaxTokens: pipeline.Unset}
	if body.Query != nil {
		req.Question = *body.Query
	}
	if err := body.apply(&req); err != nil {
		return err
	}
	// Reranking is off unless asked for: with rerank true, or a
	// rerank_top_n (which rerank false contradicts).
	rerank := body.Rerank != nil && *body.Rerank
	switch {
	case body.RerankTopN != pipeline.Unset && body.Rerank != nil && !*body.Rerank:
		return badRequest("rerank_top_n", "rerank_top_n_invalid", "rerank_top_n asks for reranking, which rerank false turns off")
	case body.RerankTopN != pipeline.Unset:
		req.RerankTopN = body.RerankTopN
		if req.RerankTopN < 1 {
			return badRequest("rerank_top_n", "rerank_top_n_out_of_range", fmt.Sprintf("rerank_top_n must be at least 1, got %d", req.RerankTopN))
		}
	case rerank:
		req.RerankTopN = pipeline.Unset // top_k's, once it is known
	}
	if body.Filter != nil {
		req.Filter = *body.Filter
	}
	var runErr error
	err := s.admitAsk(c, &req, func(req *pipeline.Request) func() {
		if rerank && body.RerankTopN == pipeline.Unset {
			req.RerankTopN = req.TopK
		}
		runErr = s.search(c, req)
		return nil
	})
	if err == nil {
		err = runErr
	}
	var ve *pipeline.ValidationError
	if errors.As(err, &ve) && ve.Field == "question" { // this body calls it query
		return badRequest("query", strings.Replace(ve.Code, "question", "query", 1), strings.Replace(ve.Message, "question", "query", 1))
	}
	return err
}

// search runs req's retrieval and writes the answer; a failure is
// returned as the error answered.
func (s *server) search(c echo.Context, req *pipeline.Request) error {
	res, err := s.deps.Retriever.Search(c.Request().Context(), req)
	var pe *ragtime.Error
	switch {
	case err == nil:
	case pipeline.IsCancelled(err):
		return nil // the client is gone
	case errors.As(err, &pe):
		return &apiError{Status: kindStatusOf(pe.Kind), Code: pe.Code, Message: pe.Message, Hint: pe.Hint}
	default:
		return err
	}
	out := searchAnswer{QueryID: res.QueryID, Retrieval: res.Retrieval, Results: make([]searchResult, len(res.Hits)),
		Stages: res.Stages, RetrievalMs: res.RetrievalMs}
	for i, h := range res.Hits {
		out.Results[i] = searchResult{Rank: i + 1, ChunkID: h.ID, DocID: h.DocID, Title: h.Title, Text: h.Text,
			Score: h.Score, Legs: h.Legs, RerankScore: h.RerankScore}
	}
	return c.JSON(http.StatusOK, out)
}
