package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"ragtime"
	"ragtime/api"
	"ragtime/llm/sim"
	"ragtime/pipeline"
	"ragtime/postgres"
	"ragtime/sweep"
)

// sweepSim's prefill: a fixed part and a part per uncached prompt token.
const sweepPrefillMs, sweepPrefillMsPerToken = 5.0, 0.2

// sweepSim is an llmsim whose prefill grows with the prompt (0.2 ms a
// token, so sixteen chunks cost about 150 ms more than one) and whose
// answers are short.
func sweepSim(t *testing.T) string {
	t.Helper()
	_, url := startSim(t, func(c *sim.Config) {
		c.PrefillMs, c.PrefillMsPerToken, c.PrefillMsQuadratic, c.ITLMs, c.OutputTokens = sweepPrefillMs, sweepPrefillMsPerToken, 0, 0, 3
	})
	return url
}

// ingestSweepCorpus ingests the labelled sweep corpus in small chunks, so
// that top_k reaches far into the 10 documents.
func ingestSweepCorpus(t *testing.T, env map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	out := runCmd(t, env, "ingest", "--data-dir", dir, "--chunk-size", "300", "--chunk-overlap", "0", "testdata/sweep/corpus")
	if !strings.Contains(out, "ingested 10 documents") {
		t.Fatalf("ingest said %q", out)
	}
	return dir
}

func readReport(t *testing.T, dir string) sweep.Report {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, sweep.ReportJSON))
	if err != nil {
		t.Fatal(err)
	}
	var rep sweep.Report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatalf("decoding %s: %v", sweep.ReportJSON, err)
	}
	return rep
}

// checkFiles checks that every output file is there and looks like what
// it claims to be.
func checkFiles(t *testing.T, dir string) {
	t.Helper()
	magic := map[string]string{
		sweep.ResultsCSV: "sweep_id,top_k,rerank_top_n,", sweep.SamplesCSV: "order,query_id,",
		sweep.ReportJSON: "{", sweep.ChartSVG: "<?xml",
	}
	for name, prefix := range magic {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if !strings.HasPrefix(string(b), prefix) {
			t.Errorf("%s starts with %.20q, want %q", name, b, prefix)
		}
	}
}

func TestSweepInProcessAgainstLLMSim(t *testing.T) {
	t.Parallel()
	dbURL, pool := testDB(t)
	env := map[string]string{"DATABASE_URL": dbURL, "RAGTIME_LLM_API_KEY": "sk-test"}
	dataDir := ingestSweepCorpus(t, env)
	simURL := sweepSim(t)
	out := t.TempDir()
	stdout := runCmd(t, env, "sweep", "--data-dir", dataDir, "--llm-provider", "openai", "--llm-base-url", simURL,
		"--llm-model", "sim", "--questions", "testdata/sweep/questions.jsonl", "--top-k", "16,1,4", "--rerank-top-n", "k", "--runs", "1",
		"--max-tokens", "3", "--seed", "42", "--ttft-budget-ms", "60000", "--out", out)

	for _, want := range []string{"seed 42", "recall@k", "recommended: top_k=", "sweep_results", "chart.svg"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout)
		}
	}
	checkFiles(t, out)
	rep := readReport(t, out)
	if rs := rep.Recommendation.Setting; rs == nil {
		t.Error("no recommendation")
	} else {
		flags := fmt.Sprintf("--top-k %d --rerank-top-n %d --max-context-tokens %d", rs.TopK, rs.RerankTopN, rs.MaxContextTokens)
		for _, want := range []string{
			"apply the recommendation: ragtime serve " + flags + "\n",
			fmt.Sprintf("  [serve]\n  top_k = %d\n  rerank_top_n = %d\n  max_context_tokens = %d\n", rs.TopK, rs.RerankTopN, rs.MaxContextTokens),
			"  ragtime sweep --data-dir " + dataDir + " --llm-provider openai --llm-base-url " + simURL + " --llm-model sim --questions testdata/sweep/questions.jsonl --runs 1 --max-tokens 3 --seed 42 --ttft-budget-ms 60000 " + flags + "\n",
		} {
			if !strings.Contains(stdout, want) {
				t.Errorf("stdout lacks %q:\n%s", want, stdout)
			}
		}
	}
	if rep.Status != "done" || rep.Planned != 18 || rep.Measured != 18 || rep.Tagged != 18 {
		t.Fatalf("status %s, planned %d, measured %d, tagged %d", rep.Status, rep.Planned, rep.Measured, rep.Tagged)
	}
	if len(rep.Settings) != 3 {
		t.Fatalf("settings %+v", rep.Settings)
	}
	// the simulator caches prefixes (by default, as vLLM), but every query
	// carries its own nonce after the system prompt: only that is cached
	if cacheWarnings(rep.Warnings) != 0 {
		t.Errorf("a default sweep warned of cache hits: %q", rep.Warnings)
	}
	for _, s := range rep.Settings {
		if s.CachedShare == nil || *s.CachedShare >= 0.5 || s.CacheHits != 0 {
			t.Errorf("%s: cached share %v, %d cache hits; want the system prompt's share only, no hits", s.Setting, s.CachedShare, s.CacheHits)
		}
	}
	// No query's first token came before the simulator's modelled prefill
	// of its uncached prompt (t0 precedes the request, and the simulator
	// sends the token no earlier than that after it arrived), so neither
	// does any setting's p50: a bound that holds on any machine, where
	// "p50 rises with k" (10–30 ms a step) is lost in a loaded machine's
	// scheduling delays.
	fastest := map[int]float64{} // top_k → the smallest modelled prefill
	rows, err := pool.Query(context.Background(), `SELECT id, top_k, ttft_ms, prompt_tokens - cached_tokens FROM queries WHERE sweep_id = $1`, rep.SweepID)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		var k, uncached int
		var ttft *float64
		if err := rows.Scan(&id, &k, &ttft, &uncached); err != nil {
			t.Fatal(err)
		}
		modelled := sweepPrefillMs + sweepPrefillMsPerToken*float64(uncached)
		if ttft == nil || *ttft < modelled-0.001 {
			t.Errorf("query %s (k=%d): ttft_ms %v, under the simulator's prefill of its %d uncached tokens, %.3f ms", id, k, show(ttft), uncached, modelled)
		}
		if f, ok := fastest[k]; !ok || modelled < f {
			fastest[k] = modelled
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	rows.Close()
	for i, s := range rep.Settings {
		if f, ok := fastest[s.TopK]; !ok || s.TTFTP50Ms < f-0.001 {
			t.Errorf("%s: TTFT p50 %.3f ms, under the fastest modelled prefill of its queries (%.3f ms, found %v)", s.Setting, s.TTFTP50Ms, f, ok)
		}
		if want := []int{1, 4, 16}[i]; s.TopK != want || s.RerankTopN != want || s.MaxContextTokens != 6000 {
			t.Errorf("setting %d = %+v, want k=%d rerank=%d budget 6000", i, s.Setting, want, want)
		}
		if s.OK != 6 || s.Recall == nil || s.HitRate == nil || s.MRR == nil {
			t.Fatalf("setting %s: ok %d, recall %v", s.Setting, s.OK, s.Recall)
		}
		if sum := s.Stack50.Total(); math.Abs(sum-s.TTFTP50Ms) > 0.01 {
			t.Errorf("%s: p50 stack sums to %.3f, p50 is %.3f", s.Setting, sum, s.TTFTP50Ms)
		}
		if i == 0 {
			continue
		}
		prev := rep.Settings[i-1]
		// ~100+ extra tokens per step up in k: with the bound above, the
		// TTFT floor rises by 0.2 ms for each of them.
		if s.PromptTokensMean <= prev.PromptTokensMean+50 {
			t.Errorf("prompt tokens %.1f at %s, %.1f at %s: want a clear rise with k", prev.PromptTokensMean, prev.Setting, s.PromptTokensMean, s.Setting)
		}
		if *s.Recall < *prev.Recall {
			t.Errorf("recall fell from %.3f at %s to %.3f at %s", *prev.Recall, prev.Setting, *s.Recall, s.Setting)
		}
	}
	if *rep.Settings[2].Recall <= *rep.Settings[0].Recall {
		t.Errorf("recall at k=16 (%.3f) is not above k=1 (%.3f): the corpus no longer tests anything", *rep.Settings[2].Recall, *rep.Settings[0].Recall)
	}

	// The recommendation follows its rule: the smallest k within the
	// tolerance of the best recall and under the budget.
	best := 0.0
	for _, s := range rep.Settings {
		best = max(best, *s.Recall)
	}
	var want *sweep.Setting
	for _, s := range rep.Settings {
		if *s.Recall >= best-0.02 && s.TTFTP95Ms < 60000 {
			want = &s.Setting
			break
		}
	}
	if rep.Recommendation.Setting == nil || want == nil || *rep.Recommendation.Setting != *want {
		t.Errorf("recommended %+v, the rule gives %+v (%s)", rep.Recommendation.Setting, want, rep.Recommendation.Why)
	}

	// Every query is in Postgres with the sweep id; the view agrees with the files.
	ctx := context.Background()
	var status, mode string
	var seed int64
	if err := pool.QueryRow(ctx, `SELECT status, mode, seed FROM sweeps WHERE id = $1`, rep.SweepID).Scan(&status, &mode, &seed); err != nil {
		t.Fatal(err)
	}
	if status != "done" || mode != "in-process" || seed != 42 {
		t.Errorf("sweeps row: %s %s %d", status, mode, seed)
	}
	var tagged, warmups int
	if err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE sweep_id = $1), count(*) FILTER (WHERE sweep_id IS NULL) FROM queries`,
		rep.SweepID).Scan(&tagged, &warmups); err != nil {
		t.Fatal(err)
	}
	if tagged != 18 || warmups != 3 {
		t.Errorf("queries: %d tagged with the sweep, %d untagged warm-ups; want 18 and 3", tagged, warmups)
	}
	rows, err = pool.Query(ctx, `SELECT top_k, ok, ttft_p50_ms, ttft_p95_ms, prompt_tokens_mean, recall
		FROM sweep_results WHERE sweep_id = $1 ORDER BY top_k`, rep.SweepID)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	i := 0
	for rows.Next() {
		var k, ok int
		var p50, p95, tokens float64
		var recall *float64
		if err := rows.Scan(&k, &ok, &p50, &p95, &tokens, &recall); err != nil {
			t.Fatal(err)
		}
		s := rep.Settings[i]
		if k != s.TopK || ok != s.OK || math.Abs(p50-s.TTFTP50Ms) > 0.002 || math.Abs(p95-s.TTFTP95Ms) > 0.002 ||
			math.Abs(tokens-s.PromptTokensMean) > 0.05 || recall == nil || *recall != *s.Recall {
			t.Errorf("sweep_results row k=%d ok=%d p50=%.3f p95=%.3f tokens=%.2f recall=%v; the report says %+v", k, ok, p50, p95, tokens, recall, s)
		}
		i++
	}
	if i != 3 {
		t.Errorf("sweep_results has %d rows, want 3", i)
	}
}

func TestSweepAgainstServer(t *testing.T) {
	t.Parallel()
	dbURL, pool := testDB(t)
	env := map[string]string{"DATABASE_URL": dbURL, "RAGTIME_LLM_API_KEY": "sk-test"}
	dataDir := ingestSweepCorpus(t, env)
	srv := startServe(t, env, "--data-dir", dataDir, "--llm-provider", "openai", "--llm-base-url", sweepSim(t), "--llm-model", "sim")

	// The API does not let a caller write into a sweep.
	resp, err := http.Post(srv.url+"/ask", "application/json", strings.NewReader(`{"question": "x", "sweep_id": "00000000-0000-0000-0000-000000000001"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("POST /ask with sweep_id: %d, want 400", resp.StatusCode)
	}

	out := t.TempDir()
	runCmd(t, env, "sweep", "--server", srv.url, "--questions", "testdata/sweep/questions.tsv", "--top-k", "1,4",
		"--rerank-top-n", "k,1", "--runs", "2", "--concurrency", "2", "--max-tokens", "3", "--out", out)
	checkFiles(t, out)
	rep := readReport(t, out)
	// k=1 with rerank k and 1 is one setting: 3 settings x 3 questions x 2 runs.
	if rep.Status != "done" || rep.Mode != "server" || rep.Planned != 18 || rep.Measured != 18 || rep.Tagged != 18 {
		t.Fatalf("status %s, mode %s, planned %d, measured %d, tagged %d", rep.Status, rep.Mode, rep.Planned, rep.Measured, rep.Tagged)
	}
	var labelled int
	for _, s := range rep.Settings {
		if s.OK != 6 || s.TTFTP50Ms <= 0 || s.PromptTokensMean <= 0 {
			t.Errorf("setting %+v", s)
		}
		labelled = s.Labelled
	}
	if labelled != 4 { // two of three TSV questions carry doc ids
		t.Errorf("labelled queries per setting %d, want 4", labelled)
	}
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM queries WHERE sweep_id = $1 AND status = 'ok'`, rep.SweepID).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 18 {
		t.Errorf("%d queries tagged in Postgres, want 18", n)
	}
	var views int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM sweep_results WHERE sweep_id = $1 AND recall IS NOT NULL`, rep.SweepID).Scan(&views); err != nil {
		t.Fatal(err)
	}
	if views != 3 {
		t.Errorf("sweep_results rows with recall: %d, want 3", views)
	}

	// A sweep whose database is not the server's is refused before it
	// measures, naming both URLs.
	otherURL, otherPool := testDB(t)
	client := &api.Client{BaseURL: srv.url, HTTP: http.DefaultClient}
	err = checkServerRecordsHere(context.Background(), client, postgres.NewStore(otherPool), "What is prefill?", srv.url, otherURL, 300*time.Millisecond)
	var ue *usageError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "--server "+srv.url+" does not record into this sweep's database --database-url "+postgres.RedactURL(otherURL)) {
		t.Errorf("sweep against another database: %v, want a refusal naming both URLs", err)
	}
	if err := checkServerRecordsHere(context.Background(), client, postgres.NewStore(pool), "What is prefill?", srv.url, dbURL, 10*time.Second); err != nil {
		t.Errorf("sweep against the server's own database: %v", err)
	}
}

func TestSweepCtrlCWritesWhatWasMeasured(t *testing.T) {
	t.Parallel()
	dbURL, pool := testDB(t)
	env := map[string]string{"DATABASE_URL": dbURL, "RAGTIME_LLM_API_KEY": "sk-test"}
	dataDir := ingestSweepCorpus(t, env)
	_, simURL := startSim(t, func(c *sim.Config) {
		c.PrefillMs, c.PrefillMsPerToken, c.PrefillMsQuadratic, c.ITLMs, c.OutputTokens = 30, 0, 0, 0, 2
	})
	out := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"sweep", "--data-dir", dataDir, "--llm-provider", "openai", "--llm-base-url", simURL, "--llm-model", "sim",
			"--questions", "testdata/sweep/questions.jsonl", "--top-k", "1,2,4,8", "--runs", "3", "--max-tokens", "2", "--out", out},
			envMap(env), &stdout, &stderr)
	}()
	eventually(t, "a progress line", func() bool {
		select {
		case err := <-done:
			t.Fatalf("sweep ended before Ctrl-C: %v\n%s\n%s", err, stdout.String(), stderr.String())
		default:
		}
		return strings.Contains(stderr.String(), "measured ")
	})
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("sweep after Ctrl-C: %v\n%s", err, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the sweep did not stop within 30s of Ctrl-C")
	}
	if !strings.Contains(stdout.String(), "interrupted after") {
		t.Errorf("stdout does not say it was interrupted:\n%s", stdout.String())
	}
	checkFiles(t, out)
	rep := readReport(t, out)
	if rep.Status != "interrupted" || rep.Measured == 0 || rep.Measured >= rep.Planned {
		t.Errorf("status %s, measured %d of %d", rep.Status, rep.Measured, rep.Planned)
	}
	var status string
	if err := pool.QueryRow(context.Background(), `SELECT status FROM sweeps WHERE id = $1`, rep.SweepID).Scan(&status); err != nil {
		t.Fatal(err)
	}
	if status != "interrupted" {
		t.Errorf("sweeps.status %s, want interrupted", status)
	}
}

func TestSweepRejectsBadInput(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.jsonl")
	if err := os.WriteFile(bad, []byte("{\"question\": \"ok\"}\n{\"question\": \"\", \"relevant\": []}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"no questions", nil, "--questions is required"},
		{"bad top-k", []string{"--questions", bad, "--top-k", "1,x"}, `--top-k: "x"`},
		{"top-k too big", []string{"--questions", bad, "--top-k", "101"}, "between 1 and 100"},
		{"bad rerank", []string{"--questions", bad, "--rerank-top-n", "-1"}, "--rerank-top-n"},
		{"budget with server", []string{"--questions", bad, "--server", "http://127.0.0.1:1", "--max-context-tokens", "500"}, "--max-context-tokens cannot be swept with --server"},
		{"runs", []string{"--questions", bad, "--runs", "0"}, "--runs must be 1 or more"},
		{"tolerance", []string{"--questions", bad, "--recall-tolerance", "2"}, "--recall-tolerance"},
		{"bad line", []string{"--questions", bad}, bad + ":2: \"question\" is missing or empty"},
		{"bad retrieval", []string{"--questions", bad, "--retrieval", "vector,bm25"}, `--retrieval must be hybrid, vector or lexical, got "bm25"`},
		{"bad vector-k", []string{"--questions", bad, "--vector-k", "0"}, `--vector-k: "0" is not a whole number between 1 and 1000`},
		{"bad lexical-k", []string{"--questions", bad, "--lexical-k", "5,x"}, `--lexical-k: "x"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var out, errOut syncBuffer
			err := run(context.Background(), append([]string{"sweep", "--database-url", "postgres://127.0.0.1:1/x"}, c.args...),
				envMap(nil), &out, &errOut)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want it to contain %q", err, c.want)
			}
			var ue *usageError
			if c.name != "bad line" && !errors.As(err, &ue) {
				t.Errorf("err %v is not a usage error", err)
			}
		})
	}
}

// TestSweepRerankDefaultIsServes: without --rerank-top-n the sweep measures
// what an ask without rerank_top_n gets from serve (one rule, in pipeline),
// so its recommendation applies as measured.
func TestSweepRerankDefaultIsServes(t *testing.T) {
	t.Parallel()
	fs := newFlagSet(&environment{getenv: envMap(nil), stderr: io.Discard}, "sweep", "")
	var cfg sweepConfig
	cfg.register(fs)
	if err := fs.Parse([]string{"--top-k", "1,2,16"}); err != nil {
		t.Fatal(err)
	}
	settings, err := cfg.settings()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range settings {
		if want := (pipeline.Defaults{}).RerankTopNFor(s.TopK); s.RerankTopN != want {
			t.Errorf("k=%d: sweep's default rerank_top_n %d, /ask's %d", s.TopK, s.RerankTopN, want)
		}
		req := pipeline.Request{Question: "q", TopK: s.TopK, RerankTopN: pipeline.Unset, MaxTokens: pipeline.Unset}
		if err := req.Normalize(pipeline.DefaultMaxQuestion); err != nil || req.RerankTopN != s.RerankTopN {
			t.Errorf("k=%d: an ask without rerank_top_n gets %d (%v), the sweep measured %d", s.TopK, req.RerankTopN, err, s.RerankTopN)
		}
	}
}

// TestSweepRetrievalSettings: --retrieval, --vector-k and --lexical-k
// multiply the settings, without the depth a mode has no leg for.
func TestSweepRetrievalSettings(t *testing.T) {
	t.Parallel()
	fs := newFlagSet(&environment{getenv: envMap(nil), stderr: io.Discard}, "sweep", "")
	var cfg sweepConfig
	cfg.register(fs)
	if err := fs.Parse([]string{"--top-k", "8,4", "--rerank-top-n", "0", "--retrieval", "vector,lexical,hybrid", "--vector-k", "20,50", "--lexical-k", "30"}); err != nil {
		t.Fatal(err)
	}
	settings, err := cfg.settings()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range settings {
		got = append(got, s.String())
	}
	want := []string{
		"vector vk=20 k=4 rerank=0 budget=6000", "vector vk=50 k=4 rerank=0 budget=6000", "lexical lk=30 k=4 rerank=0 budget=6000",
		"hybrid vk=20 lk=30 k=4 rerank=0 budget=6000", "hybrid vk=50 lk=30 k=4 rerank=0 budget=6000",
		"vector vk=20 k=8 rerank=0 budget=6000", "vector vk=50 k=8 rerank=0 budget=6000", "lexical lk=30 k=8 rerank=0 budget=6000",
		"hybrid vk=20 lk=30 k=8 rerank=0 budget=6000", "hybrid vk=50 lk=30 k=8 rerank=0 budget=6000",
	}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("settings\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestSweepAcrossRetrievalModes runs an in-process sweep over the three
// modes: each setting's queries ran the legs it names (the search stage's
// recorded attrs say so), and the table, the CSV and the recommendation
// carry the retrieval.
func TestSweepAcrossRetrievalModes(t *testing.T) {
	t.Parallel()
	pool, stdout, out := sweepInProcess(t, "--top-k", "4", "--rerank-top-n", "0",
		"--retrieval", "vector,lexical,hybrid", "--lexical-k", "7", "--runs", "1")
	for _, want := range []string{"retrieval  top_k", "lexical lk=7", "hybrid lk=7", "recommended: top_k=4 rerank_top_n=0 max_context_tokens=6000 retrieval="} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout)
		}
	}
	rep := readReport(t, out)
	if len(rep.Settings) != 3 || rep.Measured != 18 {
		t.Fatalf("settings %+v, measured %d", rep.Settings, rep.Measured)
	}
	modes := map[string]int{}
	for _, s := range rep.Samples {
		if s.Status != "ok" {
			t.Fatalf("sample %+v", s)
		}
		var mode *string
		var lk *float64
		if err := pool.QueryRow(context.Background(),
			`SELECT attrs->>'retrieval', (attrs->>'lexical_k')::float8 FROM query_stages WHERE query_id = $1 AND name = 'search'`, s.QueryID).Scan(&mode, &lk); err != nil {
			t.Fatal(err)
		}
		// A vector search's attrs are its figures alone (k, hits).
		if got := cmp.Or(ptrValue(mode), "vector"); got != s.Retrieval {
			t.Errorf("a %s setting's query searched %q", s.Retrieval, got)
		}
		if s.Retrieval != "vector" && (lk == nil || *lk != 7) {
			t.Errorf("a %s setting's query had lexical_k %v, want 7", s.Retrieval, lk)
		}
		modes[s.Retrieval]++
	}
	if modes["vector"] != 6 || modes["lexical"] != 6 || modes["hybrid"] != 6 {
		t.Errorf("samples per mode %v", modes)
	}
	b, err := os.ReadFile(filepath.Join(out, sweep.ResultsCSV))
	if err != nil || !strings.Contains(string(b), ",retrieval,vector_k,lexical_k,") || !strings.Contains(string(b), ",hybrid,0,7,") {
		t.Errorf("results.csv: %v\n%s", err, b)
	}
}

// sweepInProcess runs an in-process sweep of the labelled sweep corpus
// against llmsim with args added (3 answer tokens, seed 7), returning the
// database, stdout and the --out directory.
func sweepInProcess(t *testing.T, args ...string) (*pgxpool.Pool, string, string) {
	t.Helper()
	dbURL, pool := testDB(t)
	env := map[string]string{"DATABASE_URL": dbURL, "RAGTIME_LLM_API_KEY": "sk-test"}
	dataDir := ingestSweepCorpus(t, env)
	out := t.TempDir()
	base := []string{"sweep", "--data-dir", dataDir, "--llm-provider", "openai", "--llm-base-url", sweepSim(t),
		"--llm-model", "sim", "--questions", "testdata/sweep/questions.jsonl", "--max-tokens", "3", "--seed", "7", "--out", out}
	return pool, runCmd(t, env, append(base, args...)...), out
}

func ptrValue[T any](p *T) T {
	var v T
	if p != nil {
		v = *p
	}
	return v
}

// TestDocsQuestionsFile: the README's sweep example uses docs/questions.jsonl;
// every question loads and every label names a document `make run` ingests.
func TestDocsQuestionsFile(t *testing.T) {
	t.Parallel()
	qs, err := sweep.LoadQuestions("../../docs/questions.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	if len(qs) < 10 {
		t.Errorf("%d questions, want at least 10", len(qs))
	}
	for _, q := range qs {
		if len(q.Relevant) == 0 {
			t.Errorf("line %d: %q has no relevance label", q.Line, q.Text)
		}
		for _, id := range q.Relevant {
			if _, err := os.Stat(filepath.Join("../../docs", id)); err != nil {
				t.Errorf("line %d: label %q is not a document under docs/: %v", q.Line, id, err)
			}
		}
	}
}

// TestSweepWarmCacheWarns: with --warm-cache the simulator's prefix cache
// serves the repeated runs, and the sweep says the setting's figures rest
// on cache hits, in its table and its files.
func TestSweepWarmCacheWarns(t *testing.T) {
	_, stdout, out := sweepInProcess(t, "--top-k", "4", "--runs", "3", "--warm-cache")
	if !strings.Contains(stdout, "warning: k=4 rerank=3 budget=6000:") || !strings.Contains(stdout, "prefix cache") || !strings.Contains(stdout, "--warm-cache") {
		t.Errorf("stdout lacks the cache warning:\n%s", stdout)
	}
	rep := readReport(t, out)
	s := rep.Settings[0]
	if !rep.Params.WarmCache || cacheWarnings(rep.Warnings) != 1 || s.CachedShare == nil || *s.CachedShare < 0.5 || s.CacheHits < 12 {
		t.Errorf("warm cache %v, warnings %q, cached share %v, %d hits of %d; want runs 2 and 3 of all 6 questions served from the cache",
			rep.Params.WarmCache, rep.Warnings, s.CachedShare, s.CacheHits, s.CacheKnown)
	}
}

// TestAdmissionNoteSaysOnceHowToLiftTheRate: a sweep paced by serve's
// per-caller rate says so once, with the flag that lifts it.
func TestAdmissionNoteSaysOnceHowToLiftTheRate(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	note := admissionNote(&b)
	note(429, "rate_limited", time.Second)
	note(429, "rate_limited", time.Second)
	out := b.String()
	if strings.Count(out, "\n") != 1 || !strings.Contains(out, "429 rate_limited") || !strings.Contains(out, "--rate 0") {
		t.Errorf("note:\n%s", out)
	}
}

// cacheWarnings counts a sweep's prefix-cache warnings (a short sweep also
// warns that its p95s rest on too few queries).
func cacheWarnings(warnings []string) int {
	n := 0
	for _, w := range warnings {
		if strings.Contains(w, "prefix cache") {
			n++
		}
	}
	return n
}

// TestSweepSnippetRetrievalKeys: the [serve] keys the sweep prints for a
// recommended retrieval are keys serve's --config reads.
func TestSweepSnippetRetrievalKeys(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	sweep.WriteApply(&b, sweep.Setting{TopK: 8, RerankTopN: 0, Retrieval: ragtime.RetrievalHybrid, VectorK: 20, LexicalK: 40}, nil, postgres.RedactURL)
	_, snippet, ok := strings.Cut(b.String(), "(TOML):\n")
	snippet, _, _ = strings.Cut(snippet, "confirm it")
	if !ok || !strings.Contains(snippet, `retrieval = "hybrid"`) {
		t.Fatalf("apply text:\n%s", b.String())
	}
	cfgFile := filepath.Join(t.TempDir(), "ragtime.toml")
	if err := os.WriteFile(cfgFile, []byte(strings.ReplaceAll(snippet, "  ", "")), 0o600); err != nil {
		t.Fatal(err)
	}
	out := runCmd(t, nil, "config", "--config", cfgFile)
	for _, want := range []string{"retrieval", "vector-k", "lexical-k"} {
		re := regexp.MustCompile(`(?m)^` + want + `\s+(\S+)\s+file `)
		m := re.FindStringSubmatch(out)
		if m == nil {
			t.Errorf("config does not take %s from the snippet:\n%s", want, out)
			continue
		}
		if wantV := map[string]string{"retrieval": "hybrid", "vector-k": "20", "lexical-k": "40"}[want]; m[1] != wantV {
			t.Errorf("%s = %s, want %s", want, m[1], wantV)
		}
	}
	if !strings.Contains(b.String(), "ragtime serve --top-k 8 --rerank-top-n 0 --retrieval hybrid --vector-k 20 --lexical-k 40") {
		t.Errorf("apply text:\n%s", b.String())
	}
}

// TestSweepComparesTTFTBudgets: `sweep --ttft-budgets` adds a setting per
// budget at the largest --top-k, asked with ttft_budget_ms on the same
// questions, while the fixed settings are asked with none even though
// serve has a default budget; the table compares them by halves, and the
// recommendation stays a fixed top_k.
func TestSweepComparesTTFTBudgets(t *testing.T) {
	t.Parallel()
	dbURL, pool := testDB(t)
	env := map[string]string{"DATABASE_URL": dbURL, "RAGTIME_LLM_API_KEY": "sk-test"}
	dataDir := ingestSweepCorpus(t, env)
	srv := startServe(t, env, "--data-dir", dataDir, "--llm-provider", "openai", "--llm-base-url", sweepSim(t), "--llm-model", "sim",
		"--ttft-budget-ms", "5000", "--prefill-model-refresh", "1s", "--rate", "0")

	out := t.TempDir()
	stdout := runCmd(t, env, "sweep", "--server", srv.url, "--questions", "testdata/sweep/questions.tsv", "--top-k", "1,4",
		"--rerank-top-n", "0", "--ttft-budgets", "250", "--runs", "2", "--max-tokens", "3", "--out", out)
	checkFiles(t, out)
	rep := readReport(t, out)
	if len(rep.Settings) != 3 || rep.Measured != 18 {
		t.Fatalf("%d settings, %d measured; want fixed k=1, k=4 and the budget at k=4, 18 queries", len(rep.Settings), rep.Measured)
	}
	if b := rep.Settings[2]; b.TTFTBudgetMs != 250 || b.TopK != 4 || b.OK != 6 || b.TTFTP95FirstHalfMs == nil || b.TTFTP95SecondHalfMs == nil {
		t.Errorf("budget setting %+v", b)
	}
	for _, s := range rep.Samples {
		switch {
		case s.TTFTBudgetMs == 250 && !slices.Contains([]string{"held", "missed", "unmodelled"}, s.BudgetOutcome):
			t.Errorf("budget sample %d has outcome %q", s.Order, s.BudgetOutcome)
		case s.TTFTBudgetMs == 0 && s.BudgetOutcome != "":
			t.Errorf("fixed sample %d (k=%d) has a budget outcome %q", s.Order, s.TopK, s.BudgetOutcome)
		}
	}
	if rs := rep.Recommendation.Setting; rs == nil || rs.TTFTBudgetMs != 0 {
		t.Errorf("recommended %+v, want a fixed top_k", rs)
	}
	for _, want := range []string{"ttft budget", "fixed top_k against a TTFT budget", "ttft_budget_ms 250 (top_k ≤ 4)", "1st half p95"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("sweep output lacks %q:\n%s", want, stdout)
		}
	}
	// The server recorded the budget asked, and none for the fixed
	// settings, whatever its own --ttft-budget-ms.
	rows, err := pool.Query(context.Background(), `SELECT top_k, ttft_budget_ms, count(*) FROM queries WHERE sweep_id = $1 GROUP BY 1, 2 ORDER BY 1, 2`, rep.SweepID)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for rows.Next() {
		var k, n int
		var b *float64
		if err := rows.Scan(&k, &b, &n); err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("k=%d budget=%v n=%d", k, derefFloat(b), n))
	}
	if want := []string{"k=1 budget=-1 n=6", "k=4 budget=250 n=6", "k=4 budget=-1 n=6"}; !slices.Equal(got, want) {
		t.Errorf("recorded (top_k, ttft_budget_ms): %v, want %v (-1: none)", got, want)
	}
}

func derefFloat(p *float64) float64 {
	if p == nil {
		return -1
	}
	return *p
}
