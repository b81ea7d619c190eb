package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"ragtime"
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

	budgetAsk := func(query string) (meta pipeline.Meta, done ragtime.DoneEvent, sources []pipeline.Source) {
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
	var done ragtime.DoneEvent
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

// TestKeyTTFTBudget: `keys create --ttft-budget` stores a key's default
// budget, `keys list` shows it, and through a real serve an ask's budget is
// its own ttft_budget_ms (0 included), else its key's, else serve's
// --ttft-budget-ms; the record keeps the one applied.
func TestKeyTTFTBudget(t *testing.T) {
	t.Parallel()
	dbURL, pool := testDB(t)
	env := map[string]string{"DATABASE_URL": dbURL}
	dir := ingestCorpus(t, env)
	withBudget := createKey(t, env, "--name", "budgeted", "--scopes", "ask,read", "--ttft-budget", "700")
	plain := createKey(t, env, "--name", "plain", "--scopes", "ask,read")
	if out := runCmd(t, env, "keys", "list"); !strings.Contains(out, "ttft budget 700 ms") {
		t.Errorf("keys list does not show the key's budget:\n%s", out)
	}
	for _, bad := range []string{"-1", "600001"} {
		var o, e syncBuffer
		err := run(context.Background(), []string{"keys", "create", "--name", "x", "--scopes", "ask", "--ttft-budget", bad}, envMap(env), &o, &e)
		if err == nil || !strings.Contains(err.Error(), "--ttft-budget") || exitCode(err) != 2 {
			t.Errorf("keys create --ttft-budget %s: %v, want a usage error naming --ttft-budget", bad, err)
		}
	}
	srv := startServe(t, env, "--data-dir", dir, "--ttft-budget-ms", "5000")

	budgetOf := func(events []sseEvent) (id string, budget int) {
		t.Helper()
		var m struct {
			QueryID      string `json:"query_id"`
			TTFTBudgetMs int    `json:"ttft_budget_ms"`
		}
		if len(events) == 0 || events[0].Name != "meta" {
			t.Fatalf("the stream does not start with meta: %v", events)
		}
		events[0].decode(t, &m)
		if lastName(events) != "done" {
			t.Fatalf("the stream ends with %s", lastName(events))
		}
		return m.QueryID, m.TTFTBudgetMs
	}
	want := map[string]int{}
	for _, tt := range []struct {
		name, token string
		events      func(token string) []sseEvent
		want        int
	}{
		{"the key's default", withBudget.token, func(tok string) []sseEvent { return askWith(t, srv.url, "/ask?q=what+is+prefill", tok, nil) }, 700},
		{"the ask's own over the key's", withBudget.token, func(tok string) []sseEvent {
			return askWith(t, srv.url, "/ask?q=what+is+prefill&ttft_budget_ms=300", tok, nil)
		}, 300},
		{"the ask's own 0 (none) over the key's", withBudget.token, func(tok string) []sseEvent {
			return postAskWith(t, srv.url, tok, `{"question":"what is decode","ttft_budget_ms":0}`)
		}, 0},
		{"serve's default for a key without one", plain.token, func(tok string) []sseEvent { return askWith(t, srv.url, "/ask?q=what+is+decode", tok, nil) }, 5000},
	} {
		id, got := budgetOf(tt.events(tt.token))
		if got != tt.want {
			t.Errorf("%s: meta ttft_budget_ms %d, want %d", tt.name, got, tt.want)
		}
		want[id] = tt.want
	}
	eventually(t, "the four queries to be stored", func() bool { return countRows(t, pool, "queries") == len(want) })
	for id, w := range want {
		var stored *float64
		if err := pool.QueryRow(context.Background(), `SELECT ttft_budget_ms FROM queries WHERE id = $1`, id).Scan(&stored); err != nil {
			t.Fatal(err)
		}
		if (w == 0) != (stored == nil) || (stored != nil && *stored != float64(w)) {
			t.Errorf("query %s stored ttft_budget_ms %v, want %d (NULL for none)", id, stored, w)
		}
	}
}
