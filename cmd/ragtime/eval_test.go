package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
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
