package pipeline

import (
	"testing"

	"ragtime"
)

func TestDefaultsRule(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		d          Defaults
		topK, want int
	}{
		{Defaults{}, 1, 1}, {Defaults{}, 16, DefaultRerankTopN},
		{Defaults{RerankTopN: 16}, 16, 16}, {Defaults{RerankTopN: 16}, 4, 4},
		{Defaults{RerankOff: true}, 8, 0},
	} {
		if got := tc.d.RerankTopNFor(tc.topK); got != tc.want {
			t.Errorf("%+v.RerankTopNFor(%d) = %d, want %d", tc.d, tc.topK, got, tc.want)
		}
	}
	r := Request{Question: "q", TopK: Unset, RerankTopN: Unset, MaxTokens: Unset}
	if err := r.NormalizeWith(0, Defaults{TopK: 12, RerankTopN: 6}); err != nil || r.TopK != 12 || r.RerankTopN != 6 {
		t.Errorf("NormalizeWith serve's defaults: top_k %d rerank %d (%v), want 12 and 6", r.TopK, r.RerankTopN, err)
	}
	r = Request{Question: "q", TopK: 2, RerankTopN: Unset, MaxTokens: Unset}
	if err := r.NormalizeWith(0, Defaults{TopK: 12, RerankTopN: 6}); err != nil || r.TopK != 2 || r.RerankTopN != 2 {
		t.Errorf("an ask's own top_k caps the default rerank: top_k %d rerank %d (%v)", r.TopK, r.RerankTopN, err)
	}
}

func TestRetrievalDefaultsAndNote(t *testing.T) {
	t.Parallel()
	lex := Defaults{Retrieval: ragtime.RetrievalHybrid, Lexical: true}
	r := Request{Question: "q", TopK: 10, RerankTopN: Unset, MaxTokens: Unset}
	if err := r.NormalizeWith(0, lex); err != nil || r.Retrieval != ragtime.RetrievalHybrid || r.VectorK != DefaultLegK || r.LexicalK != DefaultLegK {
		t.Fatalf("hybrid defaults: %+v (%v)", r, err)
	}
	if note := rerankNote(&r); note == "" {
		t.Error("a default rerank_top_n of 3 under top_k 10 says nothing in meta")
	}
	r = Request{Question: "q", TopK: 10, RerankTopN: 10, MaxTokens: Unset, Retrieval: ragtime.RetrievalVector, LexicalK: 7, Collapse: CollapseNone}
	if err := r.NormalizeWith(0, lex); err != nil || r.VectorK != 10 || r.LexicalK != 7 || rerankNote(&r) != "" {
		t.Fatalf("vector with the caller's rerank_top_n: %+v (%v), note %q", r, err, rerankNote(&r))
	}
	// Collapsing by document needs more chunks than top_k to find top_k
	// documents, so a vector leg alone searches as deep as a hybrid's.
	r = Request{Question: "q", TopK: 10, RerankTopN: 10, MaxTokens: Unset, Retrieval: ragtime.RetrievalVector}
	if err := r.NormalizeWith(0, lex); err != nil || r.Collapse != CollapseDoc || r.VectorK != DefaultLegK {
		t.Fatalf("vector collapsed by document: %+v (%v)", r, err)
	}
	r = Request{Question: "q", TopK: 10, MaxTokens: Unset}
	if err := r.NormalizeWith(0, Defaults{Collapse: CollapseNone}); err != nil || r.Collapse != CollapseNone {
		t.Fatalf("serve's collapse none: %+v (%v)", r, err)
	}
	for _, tc := range []struct {
		r     Request
		d     Defaults
		field string
	}{
		{Request{Retrieval: "dense"}, lex, "retrieval"},
		{Request{Retrieval: ragtime.RetrievalHybrid}, Defaults{}, "retrieval"},
		{Request{VectorK: MaxLegK + 1}, lex, "vector_k"},
		{Request{LexicalK: -3}, lex, "lexical_k"},
		{Request{Collapse: "page"}, lex, "collapse"},
	} {
		tc.r.Question, tc.r.TopK, tc.r.RerankTopN, tc.r.MaxTokens = "q", Unset, Unset, Unset
		err := tc.r.NormalizeWith(0, tc.d)
		ve, ok := err.(*ValidationError)
		if !ok || ve.Field != tc.field {
			t.Errorf("%+v: %v, want an error naming %s", tc.r, err, tc.field)
		}
	}
}
