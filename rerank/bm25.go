package rerank

import (
	"context"
	"sort"

	"ragtime/lexical"
	"ragtime/pipeline"
)

// BM25 reranks candidates by Okapi BM25 of their text (title included)
// against the question, with document frequencies taken over the candidate
// list itself. Ties keep the search order.
type BM25 struct {
	scorer lexical.BM25
}

// NewBM25 returns a BM25 reranker with k1 = 1.2, b = 0.75.
func NewBM25() *BM25 { return &BM25{scorer: lexical.NewBM25()} }

// Name is the reranker's name in stage attrs.
func (*BM25) Name() string { return "bm25" }

// Rerank implements pipeline.Reranker.
func (r *BM25) Rerank(ctx context.Context, question string, hits []pipeline.Hit, topN int) ([]pipeline.Hit, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	docs := make([][]string, len(hits))
	for i, h := range hits {
		docs[i] = lexical.Words(h.Title + "\n" + h.Text)
	}
	scores := r.scorer.Score(lexical.ContentWords(question), docs)
	return rankByScores(hits, scores, topN), nil
}

// rankByScores sets each hit's RerankScore from scores (same order), sorts
// best first (ties keep the search order) and keeps at most topN.
func rankByScores(hits []pipeline.Hit, scores []float64, topN int) []pipeline.Hit {
	for i := range hits {
		s := scores[i]
		hits[i].RerankScore = &s
	}
	sort.SliceStable(hits, func(i, j int) bool { return *hits[i].RerankScore > *hits[j].RerankScore })
	if topN < len(hits) {
		hits = hits[:max(topN, 0)]
	}
	return hits
}
