package pipeline

import (
	"context"

	"ragtime"
)

// searchInStore runs a hybrid or lexical retrieval through a store that
// holds both legs (HybridSearcher): one call, which runs the legs and, when
// the store can, their fusion. The legs' own times are the store's and are
// not measured apart: vector_ms and lexical_ms are null (unknown), and so
// is fusion_ms when the store fused; a fusion the store does not run
// (weighted) is made here over the legs it returned, and timed.
func (q *query) searchInStore(ctx context.Context, hs HybridSearcher, vecs [][]float32, mode string, vk, lk int, filter Filter, ok bool) ([]Hit, map[string]any, error) {
	cfg := q.p.cfg
	collapse := q.req.Collapse == CollapseDoc
	var res LegsResult
	if ok {
		k := q.req.TopK
		if collapse {
			k = max(k, vk, lk) // deep enough for top_k documents once collapsed
		}
		lq := LegsQuery{Retrieval: mode, Question: q.req.Question, K: k, VectorK: vk, LexicalK: lk,
			Filter: filter, Fusion: cfg.Fusion}
		if mode == ragtime.RetrievalHybrid && len(vecs) > 0 {
			lq.Vector = vecs[0]
		}
		var err error
		if res, err = hs.SearchLegs(ctx, lq); err != nil {
			return nil, nil, err
		}
	}
	var hits []Hit
	var fusionMs any // null: inside the store
	fusedBy := "store"
	switch {
	case res.Fused != nil && mode != ragtime.RetrievalLexical:
		// The store fused chunks; by document, each keeps its best chunk.
		hits = withLegs(res.Fused, res.Vector, res.Lexical)
		if collapse {
			hits = collapseDocs(hits)
		}
		hits = hits[:min(len(hits), q.req.TopK)]
	case mode == ragtime.RetrievalLexical:
		hits = q.rank(mode, nil, res.Lexical)
	default:
		start := q.now()
		hits = q.rank(mode, res.Vector, res.Lexical)
		fusionMs, fusedBy = roundMs(q.now().Sub(start)), "ragtime"
	}
	q.figs.k, q.figs.hits = q.req.TopK, len(hits)
	attrs := q.figs.attrsMap(ragtime.StageSearch)
	attrs["retrieval"], attrs["collapse"] = mode, q.req.Collapse
	attrs["lexical"] = hs.LexicalName()
	attrs["lexical_k"], attrs["lexical_hits"], attrs["lexical_ms"] = lk, len(res.Lexical), nil
	if mode == ragtime.RetrievalHybrid {
		attrs["vector_k"], attrs["vector_hits"], attrs["vector_ms"] = vk, len(res.Vector), nil
		attrs["fusion"], attrs["fusion_ms"], attrs["fused_by"] = cfg.Fusion.Name(), fusionMs, fusedBy
	}
	return hits, attrs, nil
}

// withLegs sets each fused hit's ranks and scores in the legs from the
// legs' own lists (a leg that did not list a hit leaves its rank nil).
func withLegs(fused, vector, lexical []Hit) []Hit {
	markLeg(vector, true)
	markLeg(lexical, false)
	legs := make(map[string]Legs, len(vector)+len(lexical))
	for _, h := range vector {
		legs[h.ID] = h.Legs
	}
	for _, h := range lexical {
		l := legs[h.ID]
		l.LexicalRank, l.LexicalScore = h.LexicalRank, h.LexicalScore
		legs[h.ID] = l
	}
	for i := range fused {
		fused[i].Legs = legs[fused[i].ID]
	}
	return fused
}
