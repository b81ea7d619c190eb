package pipeline

import (
	"errors"
	"strings"
	"testing"

	"ragtime"
)

// A store whose data lacks the lexical leg refuses a hybrid or lexical
// request as a validation error naming retrieval (a 400), and lets a
// vector one through.
func TestLexicalMissingRefusesTheRequest(t *testing.T) {
	t.Parallel()
	d := Defaults{Retrieval: ragtime.RetrievalVector, Lexical: true,
		LexicalMissing: func() error { return errors.New(`collection "old" has no sparse vector: re-create it`) }}
	for _, mode := range []string{ragtime.RetrievalHybrid, ragtime.RetrievalLexical} {
		r := Request{Question: "q", TopK: Unset, RerankTopN: Unset, MaxTokens: Unset, Retrieval: mode}
		err := r.NormalizeWith(0, d)
		var ve *ValidationError
		if !errors.As(err, &ve) || ve.Field != "retrieval" || ve.Code != "retrieval_unsupported" || !strings.Contains(ve.Message, "re-create it") {
			t.Errorf("%s on a store without its lexical leg: %v, want a validation error on retrieval naming the fix", mode, err)
		}
	}
	r := Request{Question: "q", TopK: Unset, RerankTopN: Unset, MaxTokens: Unset}
	if err := r.NormalizeWith(0, d); err != nil || r.Retrieval != ragtime.RetrievalVector {
		t.Errorf("vector (the default) on such a store: %v, %q", err, r.Retrieval)
	}
	// A default of hybrid (serve read the collection before it was
	// re-created without the leg) falls back to vector: the request did
	// not ask for the leg; collapse by document keeps the legs deep.
	d.Retrieval = ragtime.RetrievalHybrid
	r = Request{Question: "q", TopK: Unset, RerankTopN: Unset, MaxTokens: Unset}
	if err := r.NormalizeWith(0, d); err != nil || r.Retrieval != ragtime.RetrievalVector || r.LexicalK != max(r.TopK, DefaultLegK) {
		t.Errorf("a hybrid default on a store without its leg: %v, %q (lexical_k %d)", err, r.Retrieval, r.LexicalK)
	}
}

// withLegs gives the store's fused hits each leg's rank and score from
// the legs' own lists, and none for a leg that did not list the hit.
func TestWithLegs(t *testing.T) {
	t.Parallel()
	fused := []Hit{{Chunk: Chunk{ID: "b"}, Score: 0.03}, {Chunk: Chunk{ID: "c"}, Score: 0.02}, {Chunk: Chunk{ID: "a"}, Score: 0.01}}
	vec := []Hit{{Chunk: Chunk{ID: "a"}, Score: 0.9}, {Chunk: Chunk{ID: "b"}, Score: 0.8}}
	lex := []Hit{{Chunk: Chunk{ID: "b"}, Score: 7}, {Chunk: Chunk{ID: "c"}, Score: 5}}
	got := withLegs(fused, vec, lex)
	b, c, a := got[0], got[1], got[2]
	if *b.VectorRank != 2 || *b.VectorScore != 0.8 || *b.LexicalRank != 1 || *b.LexicalScore != 7 || b.Score != 0.03 {
		t.Errorf("b: %+v", b.Legs)
	}
	if c.VectorRank != nil || *c.LexicalRank != 2 {
		t.Errorf("c (lexical only): %+v", c.Legs)
	}
	if *a.VectorRank != 1 || a.LexicalRank != nil {
		t.Errorf("a (vector only): %+v", a.Legs)
	}
}
