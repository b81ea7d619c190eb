package pipeline

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"ragtime"
)

// search runs the search stage: the legs the request's retrieval names
// (both at once in a hybrid, each on its own goroutine), their fusion, and
// the cut to top_k. It returns the stage's attrs, or nil when its figures
// say it all (vector retrieval, as before hybrid retrieval was added).
func (q *query) search(ctx context.Context, vecs [][]float32) ([]Hit, map[string]any, error) {
	cfg := q.p.cfg
	mode := cmp.Or(q.req.Retrieval, ragtime.RetrievalVector)
	vk, lk := cmp.Or(q.req.VectorK, q.req.TopK), cmp.Or(q.req.LexicalK, q.req.TopK)
	// The caller's tenant scope narrows the request's filter; when the two
	// exclude each other nothing can match and no search is made.
	filter, ok := q.req.Filter.Within(q.req.Scope)
	if mode == ragtime.RetrievalVector {
		var hits []Hit
		var err error
		if ok {
			hits, err = cfg.Searcher.Search(ctx, vecs[0], vk, filter)
		}
		if q.req.Collapse == CollapseDoc {
			hits = collapseDocs(hits)
		}
		hits = hits[:min(len(hits), q.req.TopK)]
		markLeg(hits, true)
		q.figs.k, q.figs.hits = q.req.TopK, len(hits)
		return hits, nil, err
	}
	if cfg.Lexical == nil {
		if hs, isHybrid := cfg.Searcher.(HybridSearcher); isHybrid {
			return q.searchInStore(ctx, hs, vecs, mode, vk, lk, filter, ok)
		}
		return nil, nil, fmt.Errorf("retrieval %q needs a lexical leg, and the store has none", mode)
	}
	var vhits, lhits []Hit
	var verr, lerr error
	var vdur, ldur time.Duration
	if ok {
		var wg sync.WaitGroup
		if mode == ragtime.RetrievalHybrid {
			wg.Go(func() {
				start := q.now()
				vhits, verr = cfg.Searcher.Search(ctx, vecs[0], vk, filter)
				vdur = q.now().Sub(start)
			})
		}
		start := q.now()
		lhits, lerr = cfg.Lexical.SearchText(ctx, q.req.Question, lk, filter)
		ldur = q.now().Sub(start)
		wg.Wait()
	}
	if err := errors.Join(verr, lerr); err != nil {
		return nil, nil, err
	}
	fuseStart := q.now()
	hits := q.rank(mode, vhits, lhits)
	fuseDur := q.now().Sub(fuseStart)
	q.figs.k, q.figs.hits = q.req.TopK, len(hits)
	attrs := q.figs.attrsMap(ragtime.StageSearch)
	attrs["retrieval"], attrs["collapse"] = mode, q.req.Collapse
	attrs["lexical"] = cfg.Lexical.LexicalName()
	attrs["lexical_k"], attrs["lexical_hits"], attrs["lexical_ms"] = lk, len(lhits), roundMs(ldur)
	if mode == ragtime.RetrievalHybrid {
		attrs["vector_k"], attrs["vector_hits"], attrs["vector_ms"] = vk, len(vhits), roundMs(vdur)
		attrs["fusion"], attrs["fusion_ms"] = cfg.Fusion.Name(), roundMs(fuseDur)
	}
	return hits, attrs, nil
}

// rank makes the search's top_k of its legs' hits: a lexical leg alone
// collapsed or as it is, two legs fused by document or by chunk.
func (q *query) rank(mode string, vhits, lhits []Hit) []Hit {
	switch {
	case mode == ragtime.RetrievalLexical:
		if q.req.Collapse == CollapseDoc {
			lhits = collapseLexical(lhits)
		}
		markLeg(lhits, false)
		return lhits[:min(len(lhits), q.req.TopK)]
	case q.req.Collapse == CollapseDoc:
		return q.p.cfg.Fusion.FuseDocs(vhits, lhits, q.req.TopK)
	default:
		return q.p.cfg.Fusion.Fuse(vhits, lhits, q.req.TopK)
	}
}

// rerankNote says why a request that named no rerank_top_n gets fewer
// reranked chunks in its context than top_k retrieved; empty otherwise.
func rerankNote(r *Request) string {
	if !r.RerankDefaulted || r.RerankTopN == 0 || r.RerankTopN >= r.TopK {
		return ""
	}
	return fmt.Sprintf("rerank_top_n defaults to %d (serve's --rerank-top-n): the prompt keeps the %d best reranked of the %d retrieved chunks, "+
		"so prefill stays short; send rerank_top_n=%d to keep them all", r.RerankTopN, r.RerankTopN, r.TopK, r.TopK)
}

// SearchRecorder stores finished retrieval-only queries (POST /v1/search).
//
// Contract: as Recorder's: RecordSearch must not block on storage, and is
// safe for concurrent use.
type SearchRecorder interface {
	RecordSearch(rec SearchRecord)
}

// SearchRecord is one finished retrieval-only query as it is stored (the
// searches table).
type SearchRecord struct {
	QueryID   string
	CreatedAt time.Time
	KeyID     string
	// Question is empty when questions are stored as hashes only.
	Question       string
	QuestionSHA256 string
	Retrieval      string
	TopK           int
	VectorK        int
	LexicalK       int
	RerankTopN     int
	Hits           int
	Status         string
	ErrorCode      string
	// RetrievalMs is embed + search + rerank; E2EMs is t0 → the result.
	RetrievalMs float64
	E2EMs       float64
	Stages      []ragtime.Span
}

// SearchResult is what Search found, and how long each stage took.
type SearchResult struct {
	QueryID   string
	Retrieval string
	// Hits are best first, with their legs' ranks and scores, and
	// RerankScore when they were reranked.
	Hits        []Hit
	Stages      []ragtime.Span
	RetrievalMs float64
}

// Search runs req's retrieval alone — the embed, search and (when
// req.RerankTopN > 0) rerank stages, timed as an ask's — and records it
// with cfg.SearchRecorder. req has been normalised; a failure is a
// *Error naming its stage.
func (p *Pipeline) Search(ctx context.Context, req *Request) (*SearchResult, error) {
	q := p.start(ctx, req) // not traced: a trace ends with an ask's record
	err := q.searchStages(ctx)
	res := &SearchResult{QueryID: q.id, Retrieval: cmp.Or(q.req.Retrieval, ragtime.RetrievalVector), Hits: q.hits}
	for i := range q.spans {
		q.materialize(i)
		switch q.spans[i].Name {
		case ragtime.StageEmbed, ragtime.StageSearch, ragtime.StageRerank:
			res.RetrievalMs += q.spans[i].DurationMs
		}
	}
	res.RetrievalMs = round3(res.RetrievalMs)
	res.Stages = q.spans
	rec := SearchRecord{QueryID: q.id, CreatedAt: q.t0.UTC(), KeyID: q.req.KeyID, Retrieval: res.Retrieval,
		TopK: q.req.TopK, VectorK: q.req.VectorK, LexicalK: q.req.LexicalK, RerankTopN: q.req.RerankTopN,
		Hits: len(q.hits), Status: ragtime.StatusOK, RetrievalMs: res.RetrievalMs, Stages: q.spans}
	sum := sha256.Sum256([]byte(q.req.Question))
	rec.QuestionSHA256 = hex.EncodeToString(sum[:])
	if p.cfg.StoreQuestion {
		rec.Question = q.req.Question
	}
	var perr *ragtime.Error
	if err != nil {
		perr = AsError("", err)
		rec.Status, rec.ErrorCode = ragtime.StatusError, perr.Code
		if IsCancelled(err) {
			rec.Status = ragtime.StatusCancelled
		}
	}
	rec.E2EMs = q.ms(q.now())
	if p.cfg.SearchRecorder != nil {
		p.cfg.SearchRecorder.RecordSearch(rec)
	}
	if perr != nil {
		return res, perr
	}
	return res, nil
}

// searchStages runs a retrieval-only query's stages (an ask's up to
// rerank, with no rerank stage when rerank_top_n is 0), leaving the hits in
// q.hits.
func (q *query) searchStages(ctx context.Context) error {
	var err error
	q.hits, err = q.retrieve(ctx, nil, false)
	return err
}
