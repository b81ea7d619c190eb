package qdrant

import (
	"context"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"

	qc "github.com/qdrant/go-client/qdrant"

	"ragtime"
	"ragtime/lexical"
	"ragtime/pipeline"
	"ragtime/retrieval"
	"ragtime/retrieval/qdrant/qdranttest"
)

// wordDoc is a one-chunk document whose text is text and whose vector
// points along axis a.
func wordDoc(id, text string, a int) retrieval.Document {
	return retrieval.Document{DocID: id, Title: strings.TrimSuffix(id, ".md"), ContentHash: "h-" + id, Source: "/c/" + id,
		Chunks:  []pipeline.Chunk{{Text: text, Metadata: map[string]string{"lang": "en"}}},
		Vectors: [][]float32{vec(a, 0.1)}}
}

func hybridStore(t *testing.T, addr, collection string) *Store {
	t.Helper()
	ctx := context.Background()
	s, err := Open(ctx, Config{Addr: addr, Collection: collection, Dimension: dim, Embedder: "test-embedder", Create: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	for _, d := range []retrieval.Document{
		wordDoc("evict.md", "The cache evicts the least recently used entries when memory runs short.", 0),
		wordDoc("tls.md", "Certificates are reloaded when the TLS files change on disk.", 1),
		wordDoc("pool.md", "The connection pool keeps idle connections for reuse.", 2),
		wordDoc("disk.md", "A cache on disk survives restarts; memory does not.", 3),
	} {
		if err := s.ReplaceDocument(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// runHybridSuite is what every Qdrant (the fake and a real one) must show
// of the lexical leg: BM25 order from the sparse vectors, one fused list
// whose RRF scores are ragtime's own, each leg's ranks on the hits.
func runHybridSuite(t *testing.T, addr, collection string) {
	ctx := context.Background()
	s := hybridStore(t, addr, collection)
	if err := s.LexicalMissing(); err != nil {
		t.Fatalf("a collection ragtime created reports %v", err)
	}

	// Lexical alone: only chunks holding a question word, the one holding
	// the rarer (evict) above the one holding the commoner (cache).
	res, err := s.SearchLegs(ctx, pipeline.LegsQuery{Retrieval: ragtime.RetrievalLexical, Question: "How does the cache evict?", K: 10, LexicalK: 10})
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(res.Lexical); !slices.Equal(got, []string{"evict.md#0", "disk.md#0"}) {
		t.Fatalf("lexical leg = %v, want evict.md#0 then disk.md#0", got)
	}
	if res.Fused != nil || res.Vector != nil {
		t.Errorf("a lexical retrieval returned fused %v / vector %v", ids(res.Fused), ids(res.Vector))
	}
	if res.Lexical[0].Text == "" || res.Lexical[0].Title != "evict" {
		t.Errorf("a lexical hit lacks its payload: %+v", res.Lexical[0].Chunk)
	}
	if res, err := s.SearchLegs(ctx, pipeline.LegsQuery{Retrieval: ragtime.RetrievalLexical, Question: "what is the", K: 10, LexicalK: 10}); err != nil || len(res.Lexical) != 0 {
		t.Errorf("a question of stop words: %v, %v; want no hits and no error", ids(res.Lexical), err)
	}

	// The BM25 reranker's scores (ScoreLexical): the lexical leg's, with
	// the collection's idf, 0 for a candidate without a question word, and
	// the same whichever candidates are scored beside it.
	cands, err := s.SearchLegs(ctx, pipeline.LegsQuery{Retrieval: ragtime.RetrievalHybrid, Vector: vec(0, 0), Question: "How does the cache evict?",
		K: 4, VectorK: 4, LexicalK: 4, Fusion: pipeline.Fusion{Method: pipeline.FusionWeighted}})
	if err != nil || len(cands.Vector) != 4 {
		t.Fatalf("4 candidates: %v, %v", ids(cands.Vector), err)
	}
	scores, err := s.ScoreLexical(ctx, "How does the cache evict?", cands.Vector)
	if err != nil {
		t.Fatal(err)
	}
	lexScore := map[string]float64{}
	for _, h := range res.Lexical {
		lexScore[h.ID] = h.Score
	}
	for i, h := range cands.Vector {
		if math.Abs(scores[i]-lexScore[h.ID]) > 1e-6 {
			t.Errorf("ScoreLexical of %s = %.6f, the lexical leg's %.6f", h.ID, scores[i], lexScore[h.ID])
		}
	}
	for i, h := range cands.Vector {
		alone, err := s.ScoreLexical(ctx, "How does the cache evict?", cands.Vector[i:i+1])
		if err != nil || math.Abs(alone[0]-scores[i]) > 1e-6 {
			t.Errorf("ScoreLexical of %s alone = %v (%v), among four %.6f", h.ID, alone, err, scores[i])
		}
	}

	// Hybrid with RRF: Qdrant's fusion is ragtime's, to the score.
	q := pipeline.LegsQuery{Retrieval: ragtime.RetrievalHybrid, Vector: vec(3, 0), Question: "cache memory eviction", K: 3, VectorK: 4, LexicalK: 4}
	res, err = s.SearchLegs(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Fused) != 3 || len(res.Vector) != 4 || len(res.Lexical) != 2 {
		t.Fatalf("hybrid: fused %v, vector %v, lexical %v; want 3, 4 and 2 hits", ids(res.Fused), ids(res.Vector), ids(res.Lexical))
	}
	want := pipeline.Fusion{}.Fuse(slices.Clone(res.Vector), slices.Clone(res.Lexical), q.K)
	for i, h := range res.Fused {
		if math.Abs(h.Score-want[i].Score) > 1e-6 {
			t.Errorf("fused #%d %s scores %.6f, ragtime's RRF (k 60) gives %s %.6f", i+1, h.ID, h.Score, want[i].ID, want[i].Score)
		}
	}
	if res.Fused[0].ID != "disk.md#0" {
		t.Errorf("fused top = %s, want disk.md#0 (first in both legs)", res.Fused[0].ID)
	}

	// Weighted: the legs come back whole, for ragtime to fuse.
	w := 0.3
	q.Fusion = pipeline.Fusion{Method: pipeline.FusionWeighted, VectorWeight: &w}
	res, err = s.SearchLegs(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	if res.Fused != nil || len(res.Vector) != 4 || len(res.Lexical) != 2 || res.Vector[0].Text == "" {
		t.Errorf("weighted: fused %v, vector %v, lexical %v; want no fused list and both legs with their text", ids(res.Fused), ids(res.Vector), ids(res.Lexical))
	}

	// A filter narrows both legs.
	q.Fusion = pipeline.Fusion{}
	q.Filter = pipeline.Filter{DocIDs: []string{"evict.md", "pool.md"}}
	res, err = s.SearchLegs(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range slices.Concat(res.Fused, res.Vector, res.Lexical) {
		if h.DocID != "evict.md" && h.DocID != "pool.md" {
			t.Errorf("filtered hybrid returned %s", h.ID)
		}
	}
}

func TestQdrantHybridContract(t *testing.T) {
	t.Parallel()
	_, addr := qdranttest.Start(t)
	runHybridSuite(t, addr, "hybrid")
}

// TestQdrantHybridWire: the collection declares the sparse vector with the
// idf modifier, every point carries its chunk's sparse vector, and a
// hybrid retrieval is one QueryBatch: the fused query (both legs
// prefetched at their own depths, RRF with ragtime's k + 1), then each leg.
func TestQdrantHybridWire(t *testing.T) {
	t.Parallel()
	srv, addr := qdranttest.Start(t)
	s := hybridStore(t, addr, "wire")
	creates := qdranttest.Recorded[*qc.CreateCollection](srv)
	if len(creates) != 1 {
		t.Fatalf("%d creates", len(creates))
	}
	sp := creates[0].GetSparseVectorsConfig().GetMap()[SparseName]
	if sp == nil || sp.GetModifier() != qc.Modifier_Idf {
		t.Fatalf("collection's sparse vectors: %v; want %q with the idf modifier", creates[0].GetSparseVectorsConfig(), SparseName)
	}
	if got := creates[0].GetMetadata()[MetaLexical].GetStringValue(); got != LexicalEncoding {
		t.Errorf("metadata %s = %q, want %q", MetaLexical, got, LexicalEncoding)
	}
	ups := qdranttest.Recorded[*qc.UpdateBatchPoints](srv)
	pt := ups[0].GetOperations()[0].GetUpsert().GetPoints()[0]
	named := pt.GetVectors().GetVectors().GetVectors()
	wantIx, wantVals := retrieval.AnalyseChunk(&pipeline.Chunk{Title: "evict", Text: "The cache evicts the least recently used entries when memory runs short."}).Sparse()
	if named[""].GetDense() == nil || !slices.Equal(named[SparseName].GetSparse().GetIndices(), wantIx) || !slices.Equal(named[SparseName].GetSparse().GetValues(), wantVals) {
		t.Fatalf("point vectors %v; want the dense vector and the chunk's sparse vector %v %v", named, wantIx, wantVals)
	}

	q := pipeline.LegsQuery{Retrieval: ragtime.RetrievalHybrid, Vector: vec(0, 0), Question: "cache eviction", K: 2, VectorK: 7, LexicalK: 5}
	if _, err := s.SearchLegs(context.Background(), q); err != nil {
		t.Fatal(err)
	}
	batches := qdranttest.Recorded[*qc.QueryBatchPoints](srv)
	if len(batches) != 1 || len(batches[0].GetQueryPoints()) != 3 {
		t.Fatalf("%d batches (%v); want one of three queries", len(batches), batches)
	}
	fused := batches[0].GetQueryPoints()[0]
	pf := fused.GetPrefetch()
	if len(pf) != 2 || pf[0].GetLimit() != 7 || pf[1].GetLimit() != 5 || pf[1].GetUsing() != SparseName || pf[0].GetUsing() != "" {
		t.Fatalf("prefetches %v; want dense (limit 7) and %q (limit 5)", pf, SparseName)
	}
	qi, _ := lexical.SparseQuery(q.Question)
	if !slices.Equal(pf[1].GetQuery().GetNearest().GetSparse().GetIndices(), qi) {
		t.Errorf("sparse prefetch indices %v, want the question's %v", pf[1].GetQuery().GetNearest().GetSparse().GetIndices(), qi)
	}
	if fused.GetQuery().GetRrf().GetK() != pipeline.DefaultRRFK+1 || fused.GetLimit() != 2 {
		t.Errorf("fused query %v limit %d; want RRF k %d, limit 2", fused.GetQuery(), fused.GetLimit(), pipeline.DefaultRRFK+1)
	}
	if got := qdranttest.Recorded[*qc.QueryPoints](srv); len(got) != 0 {
		t.Errorf("a hybrid retrieval also sent %d single queries", len(got))
	}
}

// TestQdrantCollectionWithoutLexicalLeg: a collection created before the
// lexical leg still serves vector search and takes writes (dense only),
// and a hybrid or lexical retrieval is refused with the fix named.
func TestQdrantCollectionWithoutLexicalLeg(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	addr, c := startWithClient(t)
	if err := c.CreateCollection(ctx, &qc.CreateCollection{CollectionName: "old",
		VectorsConfig: qc.NewVectorsConfig(&qc.VectorParams{Size: dim, Distance: qc.Distance_Cosine}),
		Metadata:      qc.NewValueMap(map[string]any{MetaEmbedder: "test-embedder", MetaDimension: int64(dim)})}); err != nil {
		t.Fatal(err)
	}
	s, err := Open(ctx, Config{Addr: addr, Collection: "old", Dimension: dim, Embedder: "test-embedder"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	err = s.LexicalMissing()
	if err == nil || !strings.Contains(err.Error(), `no sparse vector "lexical"`) || !strings.Contains(err.Error(), "re-create") {
		t.Fatalf("LexicalMissing = %v; want the missing sparse vector and the fix named", err)
	}
	if err := s.ReplaceDocument(ctx, wordDoc("evict.md", "The cache evicts entries.", 0)); err != nil {
		t.Fatalf("a write to the old collection: %v", err)
	}
	hits, err := s.Search(ctx, vec(0, 0), 3, pipeline.Filter{})
	if err != nil || len(hits) != 1 {
		t.Fatalf("vector search on the old collection: %v, %v", ids(hits), err)
	}
	// The BM25 reranker gets no corpus scores from it (and then scores
	// with the candidates'), not an error that would fail the ask.
	if scores, err := s.ScoreLexical(ctx, "cache", hits); scores != nil || err != nil {
		t.Errorf("ScoreLexical on the old collection = %v, %v; want nil, nil", scores, err)
	}
	_, err = s.SearchLegs(ctx, pipeline.LegsQuery{Retrieval: ragtime.RetrievalHybrid, Vector: vec(0, 0), Question: "cache", K: 3, VectorK: 3, LexicalK: 3})
	pe := wantCode(t, err, CodeLexicalMissing)
	if !strings.Contains(pe.Hint, "ragtime ingest --store qdrant") {
		t.Errorf("hint %q does not say how to re-create the collection", pe.Hint)
	}
}

// TestQdrantCollectionWithAnotherLexicalEncoding: sparse vectors made by
// another encoding (other hashing or weights) would match the question's
// terms wrongly, so the leg counts as absent and the refusal names both
// encodings.
func TestQdrantCollectionWithAnotherLexicalEncoding(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	addr, c := startWithClient(t)
	const other = "bm25:english-snowball:fnv1a:k1=0.9,b=0.4,avgdl=60"
	if err := c.CreateCollection(ctx, &qc.CreateCollection{CollectionName: "other",
		VectorsConfig:       qc.NewVectorsConfig(&qc.VectorParams{Size: dim, Distance: qc.Distance_Cosine}),
		SparseVectorsConfig: sparseConfig(),
		Metadata:            qc.NewValueMap(map[string]any{MetaEmbedder: "test-embedder", MetaDimension: int64(dim), MetaLexical: other})}); err != nil {
		t.Fatal(err)
	}
	s, err := Open(ctx, Config{Addr: addr, Collection: "other", Dimension: dim, Embedder: "test-embedder"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	err = s.LexicalMissing()
	if err == nil || !strings.Contains(err.Error(), other) || !strings.Contains(err.Error(), LexicalEncoding) || !strings.Contains(err.Error(), "re-create") {
		t.Fatalf("LexicalMissing = %v; want both encodings and the fix named", err)
	}
	_, err = s.SearchLegs(ctx, pipeline.LegsQuery{Retrieval: ragtime.RetrievalLexical, Question: "cache", K: 3, LexicalK: 3})
	pe := wantCode(t, err, CodeLexicalMissing)
	if !strings.Contains(pe.Message, other) {
		t.Errorf("message %q does not name the collection's encoding", pe.Message)
	}
}

// startWithClient starts a contract server and a go-client of its own on
// it, to make collections as an older or another ragtime would have.
func startWithClient(t *testing.T) (string, *qc.Client) {
	t.Helper()
	_, addr := qdranttest.Start(t)
	host, port, _ := strings.Cut(addr, ":")
	p, _ := strconv.Atoi(port)
	c, err := qc.NewClient(&qc.Config{Host: host, Port: p, SkipCompatibilityCheck: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return addr, c
}
