package api_test

import (
	"context"
	"fmt"
	"net/http/httptest"

	"ragtime"
	"ragtime/api"
	"ragtime/pipeline"
)

// cannedAsker answers every question with the same short stream, as a
// pipeline would write it.
type cannedAsker struct{}

func (cannedAsker) Run(ctx context.Context, req *pipeline.Request, out pipeline.Stream) *ragtime.Record {
	ttft := 12.5
	rec := ragtime.Record{QueryID: "q-1", Model: "sim", Status: ragtime.StatusOK,
		Figures: ragtime.Figures{TTFTMs: &ttft, E2EMs: 20}}
	_ = out.Meta(pipeline.Meta{QueryID: rec.QueryID, Model: rec.Model, TopK: req.TopK})
	_ = out.Stage(pipeline.StageSpan{Span: ragtime.Span{Name: ragtime.StageEmbed, DurationMs: 1.5}})
	_ = out.Sources([]pipeline.Source{{Rank: 1, DocID: "prefill.md", Title: "prefill"}})
	_ = out.Delta(pipeline.Delta{Text: "Prefill reads the prompt [1]."})
	_ = out.Done(rec)
	return &rec
}

// printStream prints what the client replays.
type printStream struct{}

func (printStream) Meta(m pipeline.Meta) error { fmt.Println("meta", m.QueryID, m.TopK); return nil }
func (printStream) Stage(s pipeline.StageSpan) error {
	fmt.Println("stage", s.Name, s.DurationMs)
	return nil
}
func (printStream) Sources(src []pipeline.Source) error { fmt.Println("sources", len(src)); return nil }
func (printStream) Delta(d pipeline.Delta) error        { fmt.Printf("token %q\n", d.Text); return nil }
func (printStream) Done(r ragtime.Record) error         { fmt.Println("done"); return nil }
func (printStream) Fail(e *ragtime.Error) error         { fmt.Println("error", e.Code); return nil }

// The Client runs a question against a ragtime server and replays its
// stream into a pipeline.Stream, returning the record the done event told.
func ExampleClient() {
	srv := httptest.NewServer(api.NewServer(api.Deps{Asker: cannedAsker{}}))
	defer srv.Close()

	c := &api.Client{BaseURL: srv.URL}
	req := pipeline.Request{Question: "What is prefill?", TopK: 3, RerankTopN: 1, MaxTokens: 64}
	rec := c.Run(context.Background(), &req, printStream{})
	fmt.Println(rec.Status, rec.QueryID, *rec.TTFTMs)
	// Output:
	// meta q-1 3
	// stage embed 1.5
	// sources 1
	// token "Prefill reads the prompt [1]."
	// done
	// ok q-1 12.5
}
