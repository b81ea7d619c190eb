package qdrant

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"strings"

	qc "github.com/qdrant/go-client/qdrant"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"ragtime"
	"ragtime/lexical"
	"ragtime/pipeline"
	"ragtime/retrieval"
)

// The lexical leg in Qdrant: every point carries, beside its dense vector
// (the collection's unnamed one), a sparse vector named SparseName whose
// entries are its chunk's terms under lexical.Analyzer — the embedded
// store's analyzer and title field — hashed to uint32 indices (FNV-1a),
// each valued with BM25's term-frequency saturation (k1 1.2, b 0.75,
// against the fixed mean length lexical.SparseAvgLen). The collection
// scores it with Qdrant's idf modifier, and a question's sparse vector
// holds its terms' indices with value 1, so a point's score is its BM25
// score with Qdrant's corpus-wide idf.
//
// A hybrid retrieval is one QueryBatch: the fused query (both legs as
// prefetches, each with its own depth, fused by Qdrant with reciprocal
// rank fusion), then each leg again on its own, so the hits can carry
// each leg's rank and score. A weighted fusion is not one Qdrant runs
// over these legs: the batch then holds the two legs, which ragtime fuses.

// SparseName is the name of the sparse vector that holds the lexical leg.
const SparseName = "lexical"

// MetaLexical is the collection metadata key recording how the sparse
// vectors were made; LexicalEncoding is its value.
const MetaLexical = "ragtime_lexical"

// LexicalEncoding names the sparse encoding: analyzer, hash, weighting.
const LexicalEncoding = "bm25:" + lexical.Analyzer + ":fnv1a:k1=1.2,b=0.75,avgdl=85"

// CodeLexicalMissing: a hybrid or lexical retrieval was asked of a
// collection that has no sparse vector (created before ragtime stored one).
const CodeLexicalMissing = "store_lexical_missing"

// What is known of the collection's sparse vector.
const (
	lexUnknown int32 = iota
	lexPresent
	lexAbsent
)

func sparseConfig() *qc.SparseVectorConfig {
	return qc.NewSparseVectorsConfig(map[string]*qc.SparseVectorParams{
		SparseName: {Modifier: qc.Modifier_Idf.Enum()},
	})
}

// noteLexical records whether an existing collection has the sparse
// vector (with the idf modifier: without it the scores would not be BM25's)
// made by this ragtime's encoding: terms hashed or weighted otherwise
// would match the question's terms wrongly, so such a leg counts as absent.
func (s *Store) noteLexical(info *qc.CollectionInfo) {
	p := info.GetConfig().GetParams().GetSparseVectorsConfig().GetMap()[SparseName]
	why := fmt.Sprintf("has no sparse vector %q (it was created before ragtime stored the lexical leg)", SparseName)
	if p != nil && p.GetModifier() == qc.Modifier_Idf {
		got := info.GetConfig().GetMetadata()[MetaLexical].GetStringValue()
		if got == LexicalEncoding {
			s.lexical.Store(lexPresent)
			return
		}
		if got == "" {
			got = "an unknown encoding (no " + MetaLexical + " in its metadata)"
		}
		why = fmt.Sprintf("has sparse vectors %q made by %s, where this ragtime makes %s", SparseName, got, LexicalEncoding)
	}
	s.lexicalWhy.Store(&why)
	if s.lexical.Swap(lexAbsent) != lexAbsent && s.cfg.Logger != nil {
		s.cfg.Logger.Warn("qdrant collection's lexical leg cannot be used: only vector retrieval works on it",
			"collection", s.cfg.Collection, "why", why, "fix", lexicalFix)
	}
}

const lexicalFix = "re-create the collection (delete it, then run `ragtime ingest --store qdrant` again) so that every point gets its sparse vector; until then ask with retrieval=vector"

// LexicalMissing says why the collection cannot answer a hybrid or lexical
// retrieval: it was created without the sparse vector SparseName. Nil when
// it has it, is still to be created (it will have it), or has not been
// read yet.
func (s *Store) LexicalMissing() error {
	if s.lexical.Load() != lexAbsent {
		return nil
	}
	why := fmt.Sprintf("has no sparse vector %q", SparseName)
	if w := s.lexicalWhy.Load(); w != nil {
		why = *w
	}
	return fmt.Errorf("qdrant collection %q %s: %s", s.cfg.Collection, why, lexicalFix)
}

func (s *Store) lexicalMissing(err error) error {
	why := fmt.Sprintf("has no sparse vector %q (it was created before ragtime stored the lexical leg)", SparseName)
	if w := s.lexicalWhy.Load(); w != nil && err == nil {
		why = *w
	}
	msg := fmt.Sprintf("qdrant collection %q %s", s.cfg.Collection, why)
	return &ragtime.Error{Kind: ragtime.KindInvalid, Code: CodeLexicalMissing, Message: msg, Hint: lexicalFix, Err: err}
}

// LexicalName names the leg in stage attrs: the embedded store's BM25 name,
// as Qdrant scores the same terms with BM25's weights.
func (s *Store) LexicalName() string { return "qdrant-sparse:" + retrieval.LexicalLeg }

// pointVectors is a point's vectors: the dense one and, when the
// collection has the lexical leg and the chunk has terms, its sparse one.
func (s *Store) pointVectors(title, text string, vec []float32) *qc.Vectors {
	if s.lexical.Load() != lexPresent {
		return qc.NewVectorsDense(slices.Clone(vec))
	}
	ix, vals := retrieval.AnalyseChunk(&pipeline.Chunk{Title: title, Text: text}).Sparse()
	if len(ix) == 0 {
		return qc.NewVectorsDense(slices.Clone(vec))
	}
	return qc.NewVectorsMap(map[string]*qc.Vector{
		"": qc.NewVectorDense(slices.Clone(vec)), SparseName: qc.NewVectorSparse(ix, vals),
	})
}

// rrfK is the k Qdrant's parametrised RRF is sent so that its scores are
// ragtime's 1/(k + rank): Qdrant counts positions from 0, ragtime's ranks
// from 1. ok is false for a k Qdrant cannot take (not a whole number).
func rrfK(f pipeline.Fusion) (uint32, bool) {
	k := cmp.Or(f.K, pipeline.DefaultRRFK)
	if k != math.Trunc(k) || k < 1 || k >= math.MaxUint32 {
		return 0, false
	}
	return uint32(k) + 1, true
}

// SearchLegs runs a hybrid or lexical retrieval in one QueryBatch (see
// above). In a hybrid with RRF, Fused is Qdrant's fusion; with a weighted
// fusion (or a question without a searchable word, or a k Qdrant's RRF
// cannot take), Fused is nil and the caller fuses the legs.
func (s *Store) SearchLegs(ctx context.Context, q pipeline.LegsQuery) (pipeline.LegsResult, error) {
	var res pipeline.LegsResult
	hybrid := q.Retrieval == ragtime.RetrievalHybrid
	if hybrid && len(q.Vector) != s.cfg.Dimension {
		return res, &ragtime.Error{Code: CodeDimensionMismatch,
			Message: fmt.Sprintf("query vector has %d dimensions, collection %q has %d", len(q.Vector), s.cfg.Collection, s.cfg.Dimension)}
	}
	if err := s.ensure(ctx, false); err != nil {
		return res, err
	}
	if s.lexical.Load() == lexAbsent {
		return res, s.lexicalMissing(nil)
	}
	ix, vals := lexical.SparseQuery(q.Question)
	flt := toFilter(q.Filter)
	tenant := s.cfg.Cluster.tenantOf(q.Filter.Metadata)
	var dense, sparse *qc.PrefetchQuery
	if hybrid && q.VectorK > 0 {
		dense = &qc.PrefetchQuery{Query: qc.NewQueryDense(slices.Clone(q.Vector)), Limit: ptr(uint64(q.VectorK)), Filter: flt}
		if s.cfg.HNSWEf > 0 {
			dense.Params = &qc.SearchParams{HnswEf: ptr(uint64(s.cfg.HNSWEf))}
		}
		if s.cfg.ScoreThreshold != 0 {
			dense.ScoreThreshold = ptr(float32(s.cfg.ScoreThreshold))
		}
	}
	if len(ix) > 0 && q.LexicalK > 0 {
		sparse = &qc.PrefetchQuery{Query: qc.NewQuerySparse(ix, vals), Using: ptr(SparseName), Limit: ptr(uint64(q.LexicalK)), Filter: flt}
	}
	k, rrfOK := rrfK(q.Fusion)
	fuse := hybrid && dense != nil && sparse != nil && q.Fusion.Name() == pipeline.FusionRRF && rrfOK && q.K > 0
	// The legs' own queries carry the whole payload only when they are
	// the result (a weighted fusion, a lexical retrieval); beside Qdrant's
	// fusion they only say which chunk holds which rank.
	legPayload := qc.NewWithPayloadInclude(KeyDocID, KeyChunk)
	if !fuse {
		legPayload = qc.NewWithPayloadInclude(KeyDocID, KeyTitle, KeyChunk, KeyText, KeyMetadata)
	}
	var batch []*qc.QueryPoints
	leg := func(p *qc.PrefetchQuery) *qc.QueryPoints {
		return &qc.QueryPoints{CollectionName: s.cfg.Collection, Query: p.Query, Using: p.Using, Limit: p.Limit,
			Filter: p.Filter, Params: p.Params, ScoreThreshold: p.ScoreThreshold, WithPayload: legPayload}
	}
	if fuse {
		batch = append(batch, &qc.QueryPoints{CollectionName: s.cfg.Collection,
			Prefetch: []*qc.PrefetchQuery{dense, sparse},
			Query:    qc.NewQueryRRF(&qc.Rrf{K: ptr(k)}),
			Limit:    ptr(uint64(q.K)), Filter: flt,
			WithPayload: qc.NewWithPayloadInclude(KeyDocID, KeyTitle, KeyChunk, KeyText, KeyMetadata)})
	}
	vecAt, lexAt := -1, -1
	if dense != nil {
		vecAt = len(batch)
		batch = append(batch, leg(dense))
	}
	if sparse != nil {
		lexAt = len(batch)
		batch = append(batch, leg(sparse))
	}
	if len(batch) == 0 {
		return res, nil
	}
	if tenant != "" {
		for _, b := range batch {
			b.ShardKeySelector = shardSelector(tenant)
		}
	}
	cctx, cancel := s.call(ctx)
	defer cancel()
	out, err := s.client.QueryBatch(cctx, &qc.QueryBatchPoints{CollectionName: s.cfg.Collection, QueryPoints: batch,
		ReadConsistency: s.cfg.Cluster.readConsistency()})
	if err != nil {
		if tenant != "" && isMissingShardKey(err) {
			return res, nil // the tenant has no documents yet
		}
		if st, _ := status.FromError(err); st.Code() == codes.InvalidArgument && strings.Contains(strings.ToLower(st.Message()), "vector name") {
			// The collection was re-created without the leg since it was read.
			s.lexical.Store(lexAbsent)
			return res, s.lexicalMissing(err)
		}
		return res, s.classify(ctx, "searching", err)
	}
	if len(out) != len(batch) {
		return res, fmt.Errorf("qdrant at %s: searching: %d results for a batch of %d queries", s.cfg.Addr, len(out), len(batch))
	}
	hits := func(i int) []pipeline.Hit {
		if i < 0 {
			return nil
		}
		pts := out[i].GetResult()
		hs := make([]pipeline.Hit, 0, len(pts))
		for _, p := range pts {
			hs = append(hs, pipeline.Hit{Chunk: toChunk(p.GetPayload()), Score: float64(p.GetScore())})
		}
		return hs
	}
	if fuse {
		res.Fused = hits(0)
	}
	res.Vector, res.Lexical = hits(vecAt), hits(lexAt)
	return res, nil
}

// ScoreLexical returns the lexical leg's score of each hit for question
// (0 for a hit that holds none of its words): BM25 with the collection's
// own document frequencies (the sparse vector's idf modifier, computed by
// Qdrant over every point) and ragtime's term-frequency saturation, so a
// candidate's score does not depend on which others are scored beside it.
// It is one query on the sparse vector, restricted to the hits' points. A
// collection created without the lexical leg has no such statistics: nil
// scores and no error. It implements rerank.CorpusScorer: the BM25
// reranker over Qdrant.
func (s *Store) ScoreLexical(ctx context.Context, question string, hits []pipeline.Hit) ([]float64, error) {
	scores := make([]float64, len(hits))
	ix, vals := lexical.SparseQuery(question)
	if len(hits) == 0 || len(ix) == 0 {
		return scores, nil
	}
	if err := s.ensure(ctx, false); err != nil {
		return nil, err
	}
	if s.lexical.Load() == lexAbsent {
		return nil, nil
	}
	ids := make([]*qc.PointId, len(hits))
	at := make(map[string][]int, len(hits))
	for i, h := range hits {
		id := PointID(h.DocID, h.Index)
		ids[i] = qc.NewID(id)
		at[id] = append(at[id], i)
	}
	cctx, cancel := s.call(ctx)
	defer cancel()
	points, err := s.client.Query(cctx, &qc.QueryPoints{CollectionName: s.cfg.Collection,
		Query: qc.NewQuerySparse(ix, vals), Using: ptr(SparseName), Limit: ptr(uint64(len(hits))),
		Filter:          &qc.Filter{Must: []*qc.Condition{qc.NewHasID(ids...)}},
		WithPayload:     qc.NewWithPayload(false),
		ReadConsistency: s.cfg.Cluster.readConsistency()})
	if err != nil {
		return nil, s.classify(ctx, "scoring candidates by the lexical leg", err)
	}
	for _, p := range points {
		for _, i := range at[p.GetId().GetUuid()] {
			scores[i] = float64(p.GetScore())
		}
	}
	return scores, nil
}
