package eval

import (
	"context"
	"errors"
	"strings"
	"testing"

	"ragtime"
)

// tableSearcher answers from a fixed table of doc ids per (mode, question)
// and fails the questions listed in fail; it times each answer 1 ms per
// result.
type tableSearcher struct {
	docs map[string]map[string][]string
	fail map[string]bool
}

func (s tableSearcher) Search(_ context.Context, req Request) (Response, error) {
	if s.fail[req.Query] {
		return Response{}, errors.New("refused")
	}
	var resp Response
	for i, d := range s.docs[req.Retrieval][req.Query] {
		resp.Results = append(resp.Results, Result{Rank: i + 1, DocID: d, ChunkID: d + "#0"})
	}
	resp.RetrievalMs = float64(len(resp.Results))
	return resp, nil
}

func TestRunAggregates(t *testing.T) {
	t.Parallel()
	qs := []Question{
		{Text: "q1", Relevant: []string{"a"}, Line: 1},
		{Text: "q2", Relevant: []string{"b"}, Line: 2},
		{Text: "q3", Relevant: []string{"c"}, Line: 3},
	}
	s := tableSearcher{docs: map[string]map[string][]string{
		// vector finds q1 at rank 1, q2 at rank 2 and misses q3.
		ragtime.RetrievalVector: {"q1": {"a", "x"}, "q2": {"x", "b"}, "q3": {"x"}},
		// lexical loses q1 (rank 11), finds q3 at rank 1, q2 at 4.
		ragtime.RetrievalLexical: {"q1": {"1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "a"}, "q2": {"1", "2", "3", "b"}, "q3": {"c"}},
	}}
	var progress []int
	rep, err := Run(context.Background(), Options{Questions: qs, Configs: []Config{{Retrieval: ragtime.RetrievalVector, TopK: 10}, {Retrieval: ragtime.RetrievalLexical, TopK: 10}},
		Runs: 2, Searcher: s, Progress: func(done, total int) { progress = append(progress, done*100+total) }})
	if err != nil {
		t.Fatal(err)
	}
	if len(progress) != 12 || progress[11] != 1212 {
		t.Errorf("progress %v", progress)
	}
	v, l := rep.Summaries[0], rep.Summaries[1]
	if v.Questions != 3 || v.Hit1 != 0.3333 || v.Hit5 != 0.6667 || v.Hit10 != 0.6667 || v.MRR10 != 0.5 || v.Lost != 0 || len(v.Missed) != 1 || v.Missed[0] != 3 {
		t.Errorf("vector %+v", v)
	}
	// lexical: RR 0, 1/4, 1 → MRR 0.4167; it loses q1, which vector finds.
	if l.Hit1 != 0.3333 || l.Hit5 != 0.6667 || l.Hit10 != 0.6667 || l.MRR10 != 0.4167 || l.Lost != 1 || l.Missed[0] != 1 {
		t.Errorf("lexical %+v", l)
	}
	// latencies 2,2,1 ms twice for vector; 11,4,1 for lexical
	if v.RetrievalP50Ms != 2 || l.RetrievalP50Ms != 4 || l.RetrievalP95Ms != 11 {
		t.Errorf("latency: vector p50 %v, lexical p50 %v p95 %v", v.RetrievalP50Ms, l.RetrievalP50Ms, l.RetrievalP95Ms)
	}
	var b strings.Builder
	if err := rep.WriteTable(&b); err != nil || !strings.Contains(b.String(), "lost vs vector") {
		t.Errorf("table %q: %v", b.String(), err)
	}

	// A failed search is counted and the run goes on.
	s.fail = map[string]bool{"q2": true}
	rep, err = Run(context.Background(), Options{Questions: qs, Configs: []Config{{Retrieval: ragtime.RetrievalVector, TopK: 10}}, Searcher: s})
	if err != nil || rep.Summaries[0].Errors != 1 || rep.Summaries[0].Questions != 2 {
		t.Errorf("with a failure: %+v, %v", rep, err)
	}
	// An unlabelled question is refused by line.
	if _, err := Run(context.Background(), Options{Questions: []Question{{Text: "x", Line: 7}}, Configs: []Config{{}}, Searcher: s}); err == nil || !strings.Contains(err.Error(), "line 7") {
		t.Errorf("unlabelled: %v", err)
	}
}
