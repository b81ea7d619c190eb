package pipeline_test

import (
	"context"
	"fmt"
	"strings"
	"time"

	"ragtime"
	"ragtime/pipeline"
)

// echoGenerator answers with the first source's title, one word a delta.
type echoGenerator struct{ now func() time.Time }

func (g echoGenerator) Generate(ctx context.Context, req *pipeline.GenerateRequest, emit func(pipeline.Delta) error, gen *pipeline.Generation) error {
	*gen = pipeline.Generation{Provider: "echo", Model: "echo-1", RequestStart: g.now()}
	gen.GotConn, gen.WroteRequest = g.now(), g.now()
	for _, w := range strings.Fields("It is " + req.Sources[0].Title + " [1].") {
		d := pipeline.Delta{Text: w + " ", At: g.now()}
		if gen.FirstToken.IsZero() {
			gen.FirstToken = d.At
		}
		gen.LastToken = d.At
		gen.Chunks++
		if err := emit(d); err != nil {
			return err
		}
	}
	return nil
}

type oneEmbedder struct{}

func (oneEmbedder) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	return [][]float32{{1, 0}}, nil
}

type oneSearcher struct{}

func (oneSearcher) Search(ctx context.Context, q []float32, k int, f pipeline.Filter) ([]pipeline.Hit, error) {
	return []pipeline.Hit{{Chunk: pipeline.Chunk{ID: "prefill.md#0", DocID: "prefill.md", Title: "prefill", Text: "Prefill reads the prompt."}, Score: 0.9}}, nil
}

type words struct{}

func (words) Count(s string) int { return len(strings.Fields(s)) }

// printStream prints each event as it is written.
type printStream struct{}

func (printStream) Meta(m pipeline.Meta) error { fmt.Println("meta", m.QueryID); return nil }
func (printStream) Stage(s pipeline.StageSpan) error {
	fmt.Printf("stage %s %.0f ms\n", s.Name, s.DurationMs)
	return nil
}
func (printStream) Sources(src []pipeline.Source) error { fmt.Println("sources", len(src)); return nil }
func (printStream) Delta(d pipeline.Delta) error        { fmt.Printf("token %q\n", d.Text); return nil }
func (printStream) Done(r ragtime.Record) error {
	fmt.Printf("done ttft %.0f ms\n", *r.TTFTMs)
	return nil
}
func (printStream) Fail(e *ragtime.Error) error { fmt.Println("error", e.Code); return nil }

// A pipeline with in-memory parts and a clock that moves 1 ms at every
// reading: each stage it times takes 1 ms, so the output is the same on
// every run.
func Example() {
	t := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	tick := func() time.Time { t = t.Add(time.Millisecond); return t }
	p, err := pipeline.New(pipeline.Config{
		Embedder: oneEmbedder{}, Searcher: oneSearcher{}, Generator: echoGenerator{now: tick}, Counter: words{},
		Now: tick, NewID: func() string { return "q-1" },
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	req := pipeline.Request{Question: "What is prefill?", TopK: pipeline.Unset, RerankTopN: pipeline.Unset, MaxTokens: pipeline.Unset}
	if err := req.Normalize(pipeline.DefaultMaxQuestion); err != nil {
		fmt.Println(err)
		return
	}
	rec := p.Run(context.Background(), &req, printStream{})
	fmt.Println(rec.Status, rec.Usage.CompletionTokens, "tokens")
	// Output:
	// meta q-1
	// stage queue 0 ms
	// stage embed 1 ms
	// stage search 1 ms
	// stage rerank 1 ms
	// stage assemble 1 ms
	// sources 1
	// token "It "
	// token "is "
	// token "prefill "
	// token "[1]. "
	// stage llm_connect 1 ms
	// stage llm_prefill 1 ms
	// stage llm_decode 4 ms
	// done ttft 13 ms
	// ok 4 tokens
}
