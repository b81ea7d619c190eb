package rerank

import (
	"context"
	"fmt"
	"sort"

	"ragtime/lexical"
	"ragtime/pipeline"
)

// BM25 reranks candidates by Okapi BM25 of their text against the
// question, under the lexical index's analyzer and title boost
// (lexical.Analyse), with document frequencies and the mean length taken
// from the corpus: a candidate's score is its own, however many others
// are scored beside it, so a deeper candidate pool cannot demote it. Ties
// keep the search order.
type BM25 struct {
	scorer lexical.BM25
	corpus lexical.Stats
	remote CorpusScorer
}

// CorpusScorer scores candidates by BM25 with a corpus's statistics that
// live elsewhere: a Qdrant collection's lexical leg (its sparse vectors'
// idf). A candidate holding none of the question's words scores 0; nil
// scores without an error say the corpus keeps no statistics (a collection
// without the lexical leg), and the reranker then takes them from the
// candidates.
type CorpusScorer interface {
	ScoreLexical(ctx context.Context, question string, hits []pipeline.Hit) ([]float64, error)
}

// NewBM25 returns a BM25 reranker with k1 = 1.2, b = 0.75 scoring with
// corpus's statistics (the embedded store's lexical index). A nil corpus
// (a store that keeps none) takes them from the candidates.
func NewBM25(corpus lexical.Stats) *BM25 {
	if corpus == nil {
		corpus = noCorpus{}
	}
	return &BM25{scorer: lexical.NewBM25(), corpus: corpus}
}

// NewBM25Remote returns a BM25 reranker whose scores come from scorer (a
// Qdrant store, whose collection holds the corpus statistics): one request
// per rerank.
func NewBM25Remote(scorer CorpusScorer) *BM25 {
	return &BM25{scorer: lexical.NewBM25(), corpus: noCorpus{}, remote: scorer}
}

// noCorpus has no statistics: ScoreCorpus then counts over the candidates.
type noCorpus struct{}

func (noCorpus) Docs() int          { return 0 }
func (noCorpus) DocFreq(string) int { return 0 }
func (noCorpus) AvgLen() float64    { return 0 }

// Name is the reranker's name in stage attrs.
func (*BM25) Name() string { return "bm25" }

// Rerank implements pipeline.Reranker.
func (r *BM25) Rerank(ctx context.Context, question string, hits []pipeline.Hit, topN int) ([]pipeline.Hit, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if r.remote != nil {
		scores, err := r.remote.ScoreLexical(ctx, question, hits)
		if err != nil {
			return nil, fmt.Errorf("reranking %d candidates by BM25: %w", len(hits), err)
		}
		if scores != nil {
			return rankByScores(hits, scores, topN), nil
		}
	}
	docs := make([]lexical.Doc, len(hits))
	for i, h := range hits {
		docs[i] = lexical.Analyse(h.Title, h.Text)
	}
	scores := r.scorer.ScoreCorpus(lexical.Terms(question), docs, r.corpus)
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
