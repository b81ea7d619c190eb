package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"ragtime/llm/sim"
	"ragtime/pipeline"
)

// TestTTFTBudgetEndToEnd: serve against llmsim and a real Postgres. Once
// enough queries are recorded, the replica's prefill model (refreshed
// from the prefill_model view) shows in /v1/stats, and an ask with a TTFT
// budget keeps what fits: one nothing fits keeps min_chunks and says it
// missed; a generous one keeps everything; the record and budget_outcomes
// keep the account.
func TestTTFTBudgetEndToEnd(t *testing.T) {
	t.Parallel()
	dbURL, pool := testDB(t)
	env := map[string]string{"DATABASE_URL": dbURL, "RAGTIME_LLM_API_KEY": "sk-test-key-1234"}
	dataDir := ingestCorpus(t, env)
	_, simURL := startSim(t, func(c *sim.Config) {
		c.PrefillMs, c.PrefillMsPerToken, c.ITLMs, c.OutputTokens = 5, 0.05, 0, 2
	})
	srv := startServe(t, env, "--data-dir", dataDir, "--llm-provider", "openai", "--llm-base-url", simURL, "--llm-model", "sim-7b",
		"--prefill-model-refresh", "1s", "--rate", "0")
	questions := []string{"what makes the prefix cache hit?", "how does prefill grow?", "why is decode slow?", "what is the network cost?"}
	for i := range 2 * pipeline.MinFitSamples {
		k := 1 + i%8
		ask(t, srv.url, "q="+url.QueryEscape(questions[i%len(questions)])+"&top_k="+string(rune('0'+k))+"&rerank_top_n=0&max_tokens=2")
	}
	eventually(t, "the prefill model in /v1/stats", func() bool {
		resp, err := http.Get(srv.url + "/v1/stats")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var st pipeline.Stats
		b, _ := io.ReadAll(resp.Body)
		if json.Unmarshal(b, &st) != nil || len(st.PrefillModel) != 1 {
			return false
		}
		f := st.PrefillModel[0]
		return f.Model == "sim-7b" && f.Samples >= pipeline.MinFitSamples && f.RatioP90 > 0
	})

	budgetAsk := func(query string) (meta pipeline.Meta, done pipeline.DoneEvent, sources []pipeline.Source) {
		t.Helper()
		for _, ev := range ask(t, srv.url, query) {
			switch ev.Name {
			case "meta":
				ev.decode(t, &meta)
			case "sources":
				var body struct{ Sources []pipeline.Source }
				ev.decode(t, &body)
				sources = body.Sources
			case "done":
				ev.decode(t, &done)
			}
		}
		return meta, done, sources
	}
	q := "q=" + url.QueryEscape(questions[1]) + "&top_k=8&rerank_top_n=0&max_tokens=2"
	// The model refreshes once a second: the first asks after the view
	// showed it may still find none.
	var done pipeline.DoneEvent
	var sources []pipeline.Source
	var meta pipeline.Meta
	eventually(t, "a budget decided by the model", func() bool {
		meta, done, sources = budgetAsk(q + "&ttft_budget_ms=1")
		return done.BudgetOutcome != pipeline.BudgetUnmodelled
	})
	if meta.TTFTBudgetMs != 1 || done.TTFTBudgetMs == nil || *done.TTFTBudgetMs != 1 {
		t.Fatalf("meta %+v, done %+v: the budget is not carried", meta, done.Figures)
	}
	if len(sources) != 1 || done.BudgetDropped == nil || *done.BudgetDropped < 1 || done.BudgetOutcome != pipeline.BudgetMissed ||
		done.PredictedTTFTMs == nil || *done.PredictedTTFTMs <= 1 {
		t.Fatalf("a 1 ms budget: %d sources, %+v; want min_chunks (1) kept, the rest dropped, missed", len(sources), done.Figures)
	}
	_, done, sources = budgetAsk(q + "&ttft_budget_ms=1&min_chunks=2")
	if len(sources) != 2 {
		t.Fatalf("min_chunks=2: %d sources", len(sources))
	}
	_, done, all := budgetAsk(q + "&ttft_budget_ms=600000")
	if len(all) < 2 || *done.BudgetDropped != 0 || done.BudgetOutcome != pipeline.BudgetHeld {
		t.Fatalf("a generous budget: %d sources, %+v", len(all), done.Figures)
	}
	_, plain, _ := budgetAsk(q)
	if plain.TTFTBudgetMs != nil || plain.BudgetOutcome != "" {
		t.Fatalf("without a budget: %+v", plain.Figures)
	}
	eventually(t, "budget_outcomes to count the asks with a budget (1 held, 2 missed at least)", func() bool {
		var held, missed int
		err := pool.QueryRow(t.Context(), `SELECT coalesce(sum(held), 0), coalesce(sum(missed), 0) FROM budget_outcomes WHERE model = 'sim-7b'`).Scan(&held, &missed)
		return err == nil && held >= 1 && missed >= 2
	})
	// A budget out of range is refused, by name.
	resp, err := http.Post(srv.url+"/ask", "application/json", strings.NewReader(`{"question":"x","ttft_budget_ms":-5}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "ttft_budget_ms") {
		t.Fatalf("ttft_budget_ms -5: %d %s", resp.StatusCode, b)
	}
}
