package pipeline

import (
	"context"
	"math"
	"slices"
	"strings"
	"testing"

	"ragtime"
)

func legHits(vector bool, ids ...string) []Hit {
	hits := make([]Hit, len(ids))
	for i, id := range ids {
		hits[i] = Hit{Chunk: Chunk{ID: id}, Score: float64(10 - i)}
	}
	markLeg(hits, vector)
	return hits
}

func idsOf(hits []Hit) []string {
	ids := make([]string, len(hits))
	for i, h := range hits {
		ids[i] = h.ID
	}
	return ids
}

func TestFuseRRF(t *testing.T) {
	t.Parallel()
	vec := legHits(true, "a", "b", "c", "d")
	lex := legHits(false, "c", "e", "a")
	got := Fusion{}.Fuse(vec, lex, 10)
	// a: 1/61 + 1/63, c: 1/63 + 1/61 (tie: a has the better vector rank),
	// b: 1/62, e: 1/62 (tie: b has a vector rank), d: 1/64.
	if want := []string{"a", "c", "b", "e", "d"}; !slices.Equal(idsOf(got), want) {
		t.Fatalf("RRF order %v, want %v", idsOf(got), want)
	}
	a := got[0]
	if *a.VectorRank != 1 || *a.LexicalRank != 3 || *a.VectorScore != 10 || *a.LexicalScore != 8 {
		t.Errorf("a's legs: %+v", a.Legs)
	}
	if e := got[3]; e.VectorRank != nil || *e.LexicalRank != 2 {
		t.Errorf("e's legs: %+v", e.Legs)
	}
	if got := (Fusion{}).Fuse(vec, lex, 2); !slices.Equal(idsOf(got), []string{"a", "c"}) {
		t.Errorf("k=2: %v", idsOf(got))
	}
	// A small k lets rank differences weigh more: with k=1, b (vector
	// rank 2 only) beats c (ranks 3 and 1)? 1/3 vs 1/4+1/2: no, c still
	// wins, and a (1/2+1/4) ties c and keeps its vector rank first.
	if got := (Fusion{K: 1}).Fuse(vec, lex, 3); !slices.Equal(idsOf(got), []string{"a", "c", "b"}) {
		t.Errorf("k=1: %v", idsOf(got))
	}
}

func TestFuseWeighted(t *testing.T) {
	t.Parallel()
	vec := legHits(true, "a", "b", "c") // scores 10, 9, 8 → 1, 0.5, 0
	lex := legHits(false, "c", "d")     // scores 10, 9 → 1, 0
	w := 0.8
	got := Fusion{Method: FusionWeighted, VectorWeight: &w}.Fuse(vec, lex, 10)
	// a 0.8, b 0.4, c 0 + 0.2, d 0
	if want := []string{"a", "b", "c", "d"}; !slices.Equal(idsOf(got), want) {
		t.Fatalf("weighted 0.8 order %v, want %v", idsOf(got), want)
	}
	w = 0.2
	got = Fusion{Method: FusionWeighted, VectorWeight: &w}.Fuse(vec, lex, 10)
	// a 0.2, b 0.1, c 0.8, d 0
	if want := []string{"c", "a", "b", "d"}; !slices.Equal(idsOf(got), want) {
		t.Fatalf("weighted 0.2 order %v, want %v", idsOf(got), want)
	}
	if got[0].Score != 0.8 {
		t.Errorf("c's fused score %v, want 0.8", got[0].Score)
	}
}

func TestFusionCheck(t *testing.T) {
	t.Parallel()
	bad := 1.5
	for _, f := range []Fusion{{Method: "max"}, {K: -1}, {VectorWeight: &bad}} {
		if err := f.Check(); err == nil {
			t.Errorf("%+v passed", f)
		}
	}
	if err := (Fusion{}).Check(); err != nil {
		t.Error(err)
	}
}

// docHits is a leg's hits, each "doc/chunk": chunk id the whole, document
// id the part before the slash.
func docHits(ids ...string) []Hit {
	hits := make([]Hit, len(ids))
	for i, id := range ids {
		doc, _, _ := strings.Cut(id, "/")
		hits[i] = Hit{Chunk: Chunk{ID: id, DocID: doc}, Score: float64(10 - i)}
	}
	return hits
}

func TestFuseDocs(t *testing.T) {
	t.Parallel()
	// The vector leg ranks documents x, y, z (x twice); the lexical leg y,
	// x, w (y three times, one long page filling its top).
	vec := docHits("x/1", "x/2", "y/1", "z/1")
	lex := docHits("y/2", "y/3", "y/1", "x/2", "w/1")
	got := Fusion{}.FuseDocs(vec, lex, 10)
	// By document ranks: x 1/61 + 1/62, y 1/62 + 1/61 (tie: x has the
	// better vector rank), z 1/63, w 1/63 (tie: z has a vector rank).
	if want := []string{"x/1", "y/2", "z/1", "w/1"}; !slices.Equal(idsOf(got), want) {
		t.Fatalf("documents %v, want %v", idsOf(got), want)
	}
	// y's chunk is the lexical leg's, which ranks y first; x keeps the
	// vector leg's best; the ranks are the documents' in each leg, and y's
	// lexical score is its best chunk's plus DocSumWeight × its others'.
	if y := got[1]; y.DocID != "y" || *y.VectorRank != 2 || *y.LexicalRank != 1 || math.Abs(*y.LexicalScore-(10+DocSumWeight*(9+8))) > 1e-9 {
		t.Errorf("y: %+v %+v", y.Chunk, y.Legs)
	}
	if x := got[0]; *x.VectorRank != 1 || *x.LexicalRank != 2 || *x.LexicalScore != 7 {
		t.Errorf("x: %+v %+v", x.Chunk, x.Legs)
	}
	// Chunk fusion of the same legs lets y's chunks crowd the top.
	chunks := Fusion{}.Fuse(docHits("x/1", "x/2", "y/1", "z/1"), docHits("y/2", "y/3", "y/1", "x/2", "w/1"), 4)
	docs := map[string]bool{}
	for _, h := range chunks {
		docs[h.DocID] = true
	}
	if len(docs) == len(chunks) {
		t.Errorf("chunk fusion %v has one chunk per document: the test shows nothing", idsOf(chunks))
	}
}

// TestCollapseLexicalSumsADocumentsChunks: a page that matches in several
// chunks outranks one whose single chunk scores a little higher, but not
// one whose best chunk is far better.
func TestCollapseLexicalSumsADocumentsChunks(t *testing.T) {
	t.Parallel()
	hits := docHits("a/1", "b/1", "b/2", "b/3", "b/4", "c/1") // scores 10, 9, 8, 7, 6, 5
	got := collapseLexical(hits)
	// a 10, b 9 + 0.1 × (8 + 7) = 10.5 (its fourth chunk not counted), c 5
	if want := []string{"b/1", "a/1", "c/1"}; !slices.Equal(idsOf(got), want) {
		t.Errorf("collapsed %v, want %v", idsOf(got), want)
	}
	if b := got[0].Score; math.Abs(b-(9+DocSumWeight*(8+7))) > 1e-9 {
		t.Errorf("b scores %v: want its best chunk and its next %d", b, DocSumChunks)
	}
	hits = docHits("a/1", "b/1", "b/2", "b/3")
	hits[0].Score = 20
	if got := collapseLexical(hits); !slices.Equal(idsOf(got), []string{"a/1", "b/1"}) {
		t.Errorf("a far better single chunk: %v", idsOf(got))
	}
}

// TestSearchCollapsesByDefault: a vector search ranks documents unless the
// request says collapse none, and leaves the searcher's own hits as they
// were.
func TestSearchCollapsesByDefault(t *testing.T) {
	t.Parallel()
	stored := docHits("x/1", "x/2", "y/1", "x/3", "z/1")
	p, _ := newTestPipeline(t, panickingGenerator{}, func(c *Config) { c.Searcher = listSearcher{stored} }) // never called
	for _, tc := range []struct {
		collapse string
		want     []string
	}{
		{"", []string{"x/1", "y/1", "z/1"}},
		{CollapseDoc, []string{"x/1", "y/1", "z/1"}},
		{CollapseNone, []string{"x/1", "x/2", "y/1"}},
	} {
		req := Request{Question: "q", TopK: 3, RerankTopN: 0, MaxTokens: Unset, Retrieval: ragtime.RetrievalVector, Collapse: tc.collapse}
		if err := req.NormalizeWith(0, Defaults{}); err != nil {
			t.Fatal(err)
		}
		res, err := p.Search(context.Background(), &req)
		if err != nil {
			t.Fatal(err)
		}
		if got := idsOf(res.Hits); !slices.Equal(got, tc.want) {
			t.Errorf("collapse %q: %v, want %v", tc.collapse, got, tc.want)
		}
	}
	if got := idsOf(stored); !slices.Equal(got, []string{"x/1", "x/2", "y/1", "x/3", "z/1"}) {
		t.Errorf("the searcher's hits were changed: %v", got)
	}
}
