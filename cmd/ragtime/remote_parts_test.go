package main

import (
	"context"
	"strings"
	"testing"

	"ragtime/llm/sim"
)

// TestRemoteEmbedderAndRerankerAgainstLLMSim ingests and asks with the
// OpenAI-compatible and Ollama embedders and the HTTP reranker (both request
// shapes), all served by llmsim, and checks the stage attrs and scores.
func TestRemoteEmbedderAndRerankerAgainstLLMSim(t *testing.T) {
	t.Parallel()
	_, simURL := startSim(t, func(c *sim.Config) { c.APIKey = "sk-sim-embed-key-0123456789" })
	root := strings.TrimSuffix(simURL, "/v1")
	dbURL, _ := testDB(t)
	env := map[string]string{"DATABASE_URL": dbURL, "RAGTIME_EMBED_API_KEY": "sk-sim-embed-key-0123456789",
		"RAGTIME_RERANK_API_KEY": "sk-sim-embed-key-0123456789", "RAGTIME_LLM_API_KEY": "sk-sim-embed-key-0123456789"}

	for _, c := range []struct {
		name  string
		embed []string
		rr    []string
	}{
		{"openai+tei", []string{"--embedder", "openai", "--embed-base-url", simURL, "--embed-model", "sim-embed", "--embed-dimensions", "256"},
			[]string{"--reranker", "http", "--rerank-url", root, "--rerank-api", "tei"}},
		{"ollama+cohere", []string{"--embedder", "ollama", "--embed-base-url", root, "--embed-model", "sim-embed"},
			[]string{"--reranker", "http", "--rerank-url", root, "--rerank-api", "cohere", "--rerank-model", "sim-rerank"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			out := runCmd(t, env, append(append([]string{"ingest", "--data-dir", dir, "--concurrency", "2"}, c.embed...), "testdata/corpus")...)
			if !strings.Contains(out, "ingested 4 documents") {
				t.Fatalf("ingest: %s", out)
			}
			args := append(append([]string{"--data-dir", dir, "--llm-provider", "openai", "--llm-base-url", simURL, "--llm-model", "sim"}, c.embed...), c.rr...)
			srv := startServe(t, env, args...)
			events := ask(t, srv.url, "q=what+makes+prefill+slow&top_k=4&rerank_top_n=2")
			d := lastDone(t, events)
			byName := map[string]map[string]any{}
			took := map[string]float64{}
			for _, s := range d.Stages {
				byName[s.Name] = s.Attrs
				took[s.Name] = s.DurationMs
			}
			if byName["embed"]["embedder"] != "openai:sim-embed" && byName["embed"]["embedder"] != "ollama:sim-embed" {
				t.Errorf("embed attrs %v", byName["embed"])
			}
			for _, stage := range []string{"embed", "rerank"} {
				if _, ok := byName[stage]["reused"].(bool); !ok || byName[stage]["connect_ms"] == nil || byName[stage]["dns_ms"] == nil || byName[stage]["tls_ms"] == nil {
					t.Errorf("%s attrs %v lack the connection timings", stage, byName[stage])
				}
				// The simulator waits its modelled latency before answering:
				// the server's share is above 0 and within the stage.
				if w, ok := byName[stage]["server_wait_ms"].(float64); !ok || w <= 0 || w > took[stage] {
					t.Errorf("%s server_wait_ms %v, want in (0, %v]", stage, byName[stage]["server_wait_ms"], took[stage])
				}
			}
			if byName["search"]["store"] != "embedded" || byName["search"]["hits"] == nil {
				t.Errorf("search attrs %v", byName["search"])
			}
			if r, _ := byName["rerank"]["reranker"].(string); !strings.HasPrefix(r, "http:") {
				t.Errorf("rerank attrs %v", byName["rerank"])
			}
			var sawRerank bool
			for _, e := range events {
				if e.Name == "sources" {
					sawRerank = strings.Contains(string(e.Data), `"rerank_score":`) && !strings.Contains(string(e.Data), `"rerank_score":null`)
				}
			}
			if !sawRerank {
				t.Error("sources carry no rerank scores")
			}
			if strings.Contains(srv.stderr.String(), "sk-sim-embed") {
				t.Error("a key reached the log")
			}
		})
	}

	// A wrong key is refused at start with a classified, key-free error.
	bad := map[string]string{"DATABASE_URL": dbURL, "RAGTIME_EMBED_API_KEY": "sk-wrong-key-0000000000"}
	var stdout, stderr syncBuffer
	err := run(context.Background(), []string{"ingest", "--data-dir", t.TempDir(), "--embedder", "openai", "--embed-base-url", simURL, "--embed-model", "m", "testdata/corpus"}, envMap(bad), &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), "embed_auth") || strings.Contains(err.Error(), "sk-wrong") {
		t.Errorf("wrong embedding key: %v", err)
	}
}
