package api

import (
	"context"
	"testing"

	"ragtime"
	"ragtime/pipeline"
)

// TestClientSendsRetrievalKnobs: a sweep against a server measures the
// retrieval it asks for, so the client sends the mode and the leg depths
// and the server's ask handler hands them to the pipeline.
func TestClientSendsRetrievalKnobs(t *testing.T) {
	t.Parallel()
	got := make(chan pipeline.Request, 1)
	asker := askerFunc(func(_ context.Context, req *pipeline.Request, out pipeline.Stream) *ragtime.Record {
		got <- *req
		rec := ragtime.Record{QueryID: "q1", Status: ragtime.StatusOK}
		_ = out.Meta(pipeline.Meta{QueryID: rec.QueryID})
		_ = out.Done(rec)
		return &rec
	})
	ts := newTestServer(t, Deps{Asker: asker, Defaults: pipeline.Defaults{Lexical: true}})
	req := pipeline.Request{Question: "q", TopK: 4, RerankTopN: 0, MaxTokens: 8, Retrieval: ragtime.RetrievalLexical, VectorK: 9, LexicalK: 30}
	if rec := (&Client{BaseURL: ts.URL}).Run(context.Background(), &req, pipeline.Discard{}); rec.Status != ragtime.StatusOK {
		t.Fatalf("status %s: %s", rec.Status, rec.ErrorMessage)
	}
	r := <-got
	if r.Retrieval != ragtime.RetrievalLexical || r.VectorK != 9 || r.LexicalK != 30 {
		t.Errorf("the server ran retrieval %q, vector_k %d, lexical_k %d", r.Retrieval, r.VectorK, r.LexicalK)
	}
}
