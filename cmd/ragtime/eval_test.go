package main

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"ragtime"
	"ragtime/api"
	"ragtime/eval"
)

// TestEvalRefusesUnknownIDs: a label naming no indexed page stops eval
// before it measures, naming the line and the id.
func TestEvalRefusesUnknownIDs(t *testing.T) {
	t.Parallel()
	dbURL, _ := testDB(t)
	env := map[string]string{"DATABASE_URL": dbURL, "RAGTIME_LLM_API_KEY": "sk-test"}
	dataDir := ingestSweepCorpus(t, env)
	srv := startServe(t, env, "--data-dir", dataDir, "--llm-provider", "openai", "--llm-base-url", sweepSim(t), "--llm-model", "sim")
	qrels := filepath.Join(t.TempDir(), "q.jsonl")
	content := "{\"question\": \"what is prefill\", \"relevant\": [\"prefill.md\"]}\n# a comment\n{\"question\": \"what is decode\", \"relevant\": [\"decode.md\", \"missing.md\"]}\n"
	if err := os.WriteFile(qrels, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out, errOut syncBuffer
	err := run(ctx, []string{"eval", "--qrels", qrels, "--url", srv.url}, envMap(env), &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), `line 3: relevant doc id "missing.md"`) || !strings.Contains(err.Error(), "holds 10 documents") {
		t.Fatalf("err = %v", err)
	}
	if strings.Contains(out.String(), "configurations") {
		t.Errorf("eval measured before refusing: %s", out.String())
	}

	// An unlabelled question is refused by line.
	if err := os.WriteFile(qrels, []byte("{\"question\": \"a\", \"relevant\": [\"prefill.md\"]}\n{\"question\": \"b\"}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	err = run(ctx, []string{"eval", "--qrels", qrels, "--url", srv.url}, envMap(env), &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), "q.jsonl:2: the question has no \"relevant\"") {
		t.Fatalf("err = %v", err)
	}
}

// TestEvalAgainstServer runs `ragtime eval` against a real serve over the
// labelled sweep corpus: every mode and the reranker, as a table and as
// JSON, with the figures recomputed from the server's own answers.
func TestEvalAgainstServer(t *testing.T) {
	t.Parallel()
	dbURL, _ := testDB(t)
	env := map[string]string{"DATABASE_URL": dbURL, "RAGTIME_LLM_API_KEY": "sk-test"}
	dataDir := ingestSweepCorpus(t, env)
	srv := startServe(t, env, "--data-dir", dataDir, "--llm-provider", "openai", "--llm-base-url", sweepSim(t), "--llm-model", "sim", "--rate", "0")

	table := runCmd(t, env, "eval", "--qrels", "testdata/sweep/questions.jsonl", "--url", srv.url,
		"--retrieval", "vector,lexical,hybrid", "--rerank", "off,on", "--top-k", "10")
	for _, want := range []string{"6 questions, 6 configurations", "hit@10", "nDCG@10", "retrieval p95", "lost vs vector", "hybrid +rerank"} {
		if !strings.Contains(table, want) {
			t.Errorf("the table lacks %q:\n%s", want, table)
		}
	}

	raw := runCmd(t, env, "eval", "--qrels", "testdata/sweep/questions.jsonl", "--url", srv.url, "--retrieval", "vector", "--json", "--runs", "2")
	var rep eval.Report
	if err := json.Unmarshal([]byte(raw), &rep); err != nil {
		t.Fatalf("--json printed %q: %v", raw, err)
	}
	if len(rep.Summaries) != 1 || rep.Questions != 6 || rep.Runs != 2 {
		t.Fatalf("report %+v", rep)
	}
	s := rep.Summaries[0]
	if s.Questions != 6 || s.Errors != 0 || s.RetrievalP50Ms <= 0 || s.RetrievalP95Ms < s.RetrievalP50Ms {
		t.Errorf("summary %+v", s)
	}

	// The figures are the metrics of the server's answers: ask it directly.
	qs, err := eval.Load("testdata/sweep/questions.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	searcher := eval.HTTPSearcher{Client: &api.Client{BaseURL: srv.url}}
	var hit10, mrr float64
	for _, q := range qs {
		resp, err := searcher.Search(context.Background(), eval.Request{Query: q.Text, TopK: 10, Retrieval: ragtime.RetrievalVector})
		if err != nil {
			t.Fatal(err)
		}
		ranked, rel := eval.Ranked(q, resp.Results)
		hit10 += eval.HitAt(ranked, rel, 10)
		mrr += eval.ReciprocalRankAt(ranked, rel, 10)
	}
	if got, want := s.Hit10, hit10/6; math.Abs(got-want) > 1e-4 {
		t.Errorf("hit@10 = %v, the server's answers give %v", got, want)
	}
	if got, want := s.MRR10, mrr/6; math.Abs(got-want) > 1e-4 {
		t.Errorf("MRR@10 = %v, the server's answers give %v", got, want)
	}
	if s.Hit10 == 0 {
		t.Error("no question found its page in the top 10")
	}
}
