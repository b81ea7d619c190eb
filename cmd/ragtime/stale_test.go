package main

import (
	"strings"
	"testing"

	"ragtime/internal/upstream/upstreamtest"
	"ragtime/llm/sim"
)

// TestStaleKeepAliveIsRetriedEverywhere: llmsim behind a server that closes
// each connection after one answer, without `Connection: close` (as
// llama-server does after a stream). `ragtime ttft --runs 3`, `doctor` and
// three asks through serve (LLM and embedder on that server) all succeed:
// every request that met a dead reused connection before any response byte
// was sent again on a fresh one.
func TestStaleKeepAliveIsRetriedEverywhere(t *testing.T) {
	s, err := sim.New(func() sim.Config {
		c := sim.DefaultConfig()
		c.Model, c.PrefillMs, c.ITLMs = "sim-7b", 1, 1
		return c
	}())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	srv := upstreamtest.StartClosing(t, s)
	base := srv.URL + "/v1"
	llmArgs := []string{"--llm-provider", "openai", "--llm-base-url", base, "--llm-model", "sim-7b"}

	out, _, err := runOut(t, nil, append([]string{"ttft", "--runs", "3"}, llmArgs...)...)
	if err != nil {
		t.Fatalf("ttft --runs 3 failed on the stale connection: %v\n%s", err, out)
	}
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 4 {
		t.Errorf("want three runs and a summary:\n%s", out)
	}

	out, _, err = runOut(t, nil, append([]string{"doctor"}, llmArgs...)...)
	if err != nil || !strings.Contains(out, "ok    first token") {
		t.Fatalf("doctor failed on the stale connection: %v\n%s", err, out)
	}

	dbURL, _ := testDB(t)
	env := map[string]string{"DATABASE_URL": dbURL}
	embed := []string{"--embedder", "openai", "--embed-base-url", base, "--embed-model", "sim-7b", "--embed-dimensions", "256"} // llmsim serves its one --model on /v1/embeddings too
	dir := t.TempDir()
	if out := runCmd(t, env, append(append([]string{"ingest", "--data-dir", dir}, embed...), "testdata/corpus")...); !strings.Contains(out, "ingested 4 documents") {
		t.Fatalf("ingest: %s", out)
	}
	dropped := srv.Dropped.Load()
	serve := startServe(t, env, append(append([]string{"--data-dir", dir}, llmArgs...), embed...)...)
	for i := range 3 {
		if d := lastDone(t, ask(t, serve.url, "q=what+makes+prefill+slow&top_k=2&rerank_top_n=0")); d.TTFTMs <= 0 {
			t.Errorf("ask %d: done %+v", i, d)
		}
	}
	if srv.Dropped.Load() == dropped {
		t.Error("no request met a stale connection during the asks: the test no longer tests the retry")
	}
}
