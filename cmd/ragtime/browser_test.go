package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/google/uuid"

	"ragtime"
	"ragtime/llm/sim"
	"ragtime/pipeline"
	"ragtime/postgres"
)

// chromiumPath is where Debian's chromium package puts the browser;
// scripts/ensure-chromium.sh (run by `make test`) installs it when missing.
const chromiumPath = "/usr/bin/chromium"

// newBrowser starts a headless Chromium with a fresh profile, for at most a
// minute; it fails the test, never skips it, when Chromium is missing.
func newBrowser(t *testing.T) context.Context {
	t.Helper()
	path := chromiumPath
	if _, err := os.Stat(path); err != nil {
		p, lookErr := exec.LookPath("chromium")
		if lookErr != nil {
			t.Fatalf("headless Chromium is needed for the page test and is not installed: run scripts/ensure-chromium.sh (apt-get install chromium chromium-driver)")
		}
		path = p
	}
	opts := append(slices.Clone(chromedp.DefaultExecAllocatorOptions[:]),
		chromedp.ExecPath(path),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	t.Cleanup(cancelAlloc)
	bctx, cancelBrowser := chromedp.NewContext(actx)
	t.Cleanup(cancelBrowser)
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("starting headless Chromium (%s): %v", path, err)
	}
	return bctx
}

// screenshot saves the whole page as a PNG in the test's artifact
// directory (kept with `go test -artifacts -outputdir DIR`).
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	path := filepath.Join(t.ArtifactDir(), name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
}

// TestPagesInHeadlessChromium asks a question through the page of a real
// `ragtime serve` (upstream: the simulator) and checks that the answer
// streams in, that the waterfall draws stage bars while it streams and has
// every stage's bar at the end, then opens the queries, query and dashboard
// pages.
func TestPagesInHeadlessChromium(t *testing.T) {
	t.Parallel()
	dbURL, _ := testDB(t)
	env := map[string]string{"DATABASE_URL": dbURL, "RAGTIME_LLM_API_KEY": "sk-test-key-1234"}
	dataDir := ingestCorpus(t, env)
	_, simURL := startSim(t, func(c *sim.Config) {
		// A visible prefill and a decode slow enough (120 × 25 ms) that the
		// page is seen mid-stream even on a loaded machine (with 40 tokens,
		// one second, the poll missed it under a load average of 16).
		c.PrefillMs, c.PrefillMsPerToken, c.ITLMs, c.OutputTokens = 150, 0, 25, 120
		c.ServerTimings = true // llama.cpp-style timings: the waterfall splits llm_prefill
	})
	srv := startServe(t, env, "--data-dir", dataDir, "--llm-provider", "openai", "--llm-base-url", simURL, "--llm-model", "sim-7b")
	// A few queries with other top_k values, for the lists and charts.
	for _, k := range []string{"2", "8"} {
		ask(t, srv.url, "q="+url.QueryEscape("what makes the prefix cache hit?")+"&top_k="+k+"&max_tokens=8")
	}

	// Extractive answers (a few ms, no model) beside the model's, as a
	// server switched between them records: the lists and the dashboard
	// must show both without one scale or one p50 hiding either.
	recordExtractive(t, dbURL, 2)

	ctx := newBrowser(t)
	const question = "How does prefill time grow with prompt tokens?"
	// Before anything is asked, the page says where the stages will go,
	// not that it waits for one; it has a rerank field.
	if err := chromedp.Do(ctx, chromedp.Navigate(srv.url+"/"), chromedp.WaitVisible(chromedp.CSS("#rerank-top-n"))); err != nil {
		t.Fatalf("the ask page has no rerank_top_n field: %v", err)
	}
	idle := browse(t, ctx, chromedp.TextContent(chromedp.CSS("#waterfall text.idle")))
	if strings.Contains(idle, "waiting") || !strings.Contains(idle, "ask a question") {
		t.Errorf("before any ask the waterfall says %q, want a neutral line", idle)
	}
	screenshot(t, ctx, "ask-idle.png")
	// A top_k past the server's limit is refused by the page with the limit
	// the server filled in (the submit event is sent directly, past the
	// browser's own check of the input's max).
	refused := browse(t, ctx, chromedp.Evaluate[string](`(() => {
		document.querySelector("#question").value = "x";
		document.querySelector("#top-k").value = "101";
		document.querySelector("#ask-form").dispatchEvent(new Event("submit", {cancelable: true}));
		const msg = document.querySelector("#error").textContent;
		document.querySelector("#question").value = "";
		document.querySelector("#top-k").value = "";
		document.querySelector("#error").hidden = true;
		return msg;
	})()`))
	if want := fmt.Sprintf("top_k must be a whole number from 1 to %d", pipeline.MaxTopK); refused != want {
		t.Errorf("the page answered top_k 101 with %q, want %q", refused, want)
	}
	if err := chromedp.Do(ctx,
		chromedp.WaitVisible(chromedp.CSS("#question")),
		chromedp.SendKeys(chromedp.CSS("#question"), question),
		chromedp.SetValue(chromedp.CSS("#rerank-top-n"), "2"),
		chromedp.SetValue(chromedp.CSS("#top-k"), "4"),
		chromedp.Click(chromedp.CSS("#ask-button")),
	); err != nil {
		t.Fatalf("asking through the page: %v", err)
	}
	// Mid-stream: answer text showing, the first token marked, the
	// retrieval bars drawn and the generation bars not yet (they arrive
	// after the last token).
	midStream, err := chromedp.Run(ctx, chromedp.Poll[bool](`(() => {
			const a = document.querySelector("#answer.streaming");
			const bars = [...document.querySelectorAll("#waterfall rect.bar")].map(r => r.dataset.stage);
			return !!a && a.textContent.length > 0 && !document.body.dataset.done &&
				!!document.querySelector("#waterfall line.ttft-line") &&
				["embed", "search", "rerank", "assemble"].every(s => bars.includes(s)) && !bars.includes("llm_decode");
		})()`, chromedp.WithPollingInterval(5*time.Millisecond), chromedp.WithPollingTimeout(20*time.Second)))
	if err != nil || !midStream {
		state, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`(document.body.dataset.done || "running") + ": " + document.querySelector("#error").textContent`))
		t.Fatalf("never saw the answer streaming with the retrieval bars drawn: %v (page: %s)", err, state)
	}
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(`body[data-done="1"]`))); err != nil {
		t.Fatalf("waiting for the done event on the page: %v", err)
	}
	answer := browse(t, ctx, chromedp.Text(chromedp.CSS("#answer")))
	bars := browse(t, ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#waterfall rect.bar")].map(r => r.dataset.stage)`))
	shares := browse(t, ctx, chromedp.TextContent(chromedp.CSS("#waterfall text.shares")))
	ttftLabel := browse(t, ctx, chromedp.TextContent(chromedp.CSS("#waterfall text.ttft-label")))
	screenshot(t, ctx, "ask.png")

	// What the page shows is what the server stored.
	store := newStoreFor(t, dbURL)
	var stored ragtime.QueryPage
	eventually(t, "the asked query to be stored", func() bool {
		p, err := store.ListQueries(context.Background(), ragtime.QueryFilter{TopK: 4})
		stored = p
		return err == nil && len(p.Queries) == 1
	})
	q := stored.Queries[0]
	if q.RerankTopN != 2 {
		t.Errorf("the page's rerank_top_n 2 reached the server as %d", q.RerankTopN)
	}
	if len(strings.TrimSpace(answer)) < 20 || !strings.Contains(answer, "[") {
		t.Errorf("answer %q: want streamed text with citations", answer)
	}
	for name := range q.Stages {
		if !slices.Contains(bars, name) {
			t.Errorf("no bar for stage %s; bars %v", name, bars)
		}
	}
	if len(bars) != len(q.Stages) {
		t.Errorf("bars %v, stored stages %v", bars, q.Stages)
	}
	if !strings.Contains(shares, "retrieval") || !strings.Contains(shares, "prefill") || !strings.Contains(ttftLabel, "TTFT") {
		t.Errorf("shares %q, TTFT label %q", shares, ttftLabel)
	}

	// /queries: a row and a stacked bar per query, newest first; every
	// row's bar visible (the extractive ones too), nothing wrapped.
	if err := chromedp.Do(ctx, chromedp.Navigate(srv.url+"/queries"), chromedp.WaitVisible(chromedp.CSS("#rows tr.link"))); err != nil {
		t.Fatalf("queries page: %v", err)
	}
	rows := browse(t, ctx, chromedp.Evaluate[int](`document.querySelectorAll("#rows tr.link svg.stacked").length`))
	firstID := browse(t, ctx, chromedp.Evaluate[string](`document.querySelector("#rows tr.link").dataset.id`))
	if rows != 5 || firstID != q.ID {
		t.Errorf("queries page: %d rows with bars, first %s; want 5, first %s", rows, firstID, q.ID)
	}
	rowBars := browse(t, ctx, chromedp.Evaluate[[]float64](`[...document.querySelectorAll("#rows tr.link svg.stacked")].map(s =>
		[...s.querySelectorAll("rect[data-stage]")].reduce((a, r) => a + r.width.baseVal.value, 0))`))
	for i, w := range rowBars {
		if w < 20 {
			t.Errorf("queries page: row %d's bar is %.1f px wide of 220, want every row's visible (%v)", i, w, rowBars)
		}
	}
	lines := browse(t, ctx, chromedp.Evaluate[[]float64](`[...document.querySelectorAll("#rows tr.link")].map(r => r.getBoundingClientRect().height)`))
	for i, h := range lines {
		if h > 34 {
			t.Errorf("queries page: row %d is %.0f px high, want one line (times and numbers not wrapped)", i, h)
		}
	}
	choices := browse(t, ctx, chromedp.Poll[int](`document.querySelectorAll("#model option").length > 1 && document.querySelectorAll("#model option").length`,
		chromedp.WithPollingTimeout(10*time.Second)))
	if choices != 3 {
		t.Errorf("queries page: %d model choices, want all + sim-7b + extractive", choices)
	}
	screenshot(t, ctx, "queries.png")

	// /queries/:id: the full waterfall and each stage's attributes.
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#rows tr.link")), chromedp.WaitVisible(chromedp.CSS(`body[data-done="1"]`))); err != nil {
		t.Fatalf("query page: %v", err)
	}
	detailBars := browse(t, ctx, chromedp.Evaluate[int](`document.querySelectorAll("#waterfall rect.bar").length`))
	attrRows := browse(t, ctx, chromedp.Evaluate[int](`document.querySelectorAll("#stages tr").length`))
	if detailBars != len(q.Stages) || attrRows != len(q.Stages) {
		t.Errorf("query page: %d bars and %d attribute rows, want %d", detailBars, attrRows, len(q.Stages))
	}
	part := browse(t, ctx, chromedp.Evaluate[string](`[...document.querySelectorAll("#waterfall text.part-label")].map(e => e.textContent).join("|")`))
	if !strings.Contains(part, "before the server's prefill: queue, tokenize, network") {
		t.Errorf("query page: the waterfall does not name the part of llm_prefill before the server's prefill (labels %q)", part)
	}
	screenshot(t, ctx, "query.png")

	// /queries/<id> of no query: says so, draws no empty cards.
	if err := chromedp.Do(ctx, chromedp.Navigate(srv.url+"/queries/"+uuidZero), chromedp.WaitVisible(chromedp.CSS(`body[data-done="1"]`))); err != nil {
		t.Fatalf("query page of an unknown id: %v", err)
	}
	missing := browse(t, ctx, chromedp.TextContent(chromedp.CSS("#error")))
	cards := browse(t, ctx, chromedp.Evaluate[int](`[...document.querySelectorAll(".card")].filter(c => !c.hidden).length`))
	if !strings.Contains(missing, "No query with id \""+uuidZero+"\"") || cards != 1 {
		t.Errorf("query page of an unknown id: %q with %d cards shown, want the message alone", missing, cards)
	}
	screenshot(t, ctx, "query-unknown.png")

	// /dashboard: the views as charts, for the busiest model when the
	// window has several.
	if err := chromedp.Do(ctx, chromedp.Navigate(srv.url+"/dashboard?since=1h"), chromedp.WaitVisible(chromedp.CSS(`body[data-done="1"]`))); err != nil {
		t.Fatalf("dashboard: %v", err)
	}
	chosen := browse(t, ctx, chromedp.Evaluate[string](`document.querySelector("#model").selectedOptions[0].textContent`))
	if !strings.HasPrefix(chosen, "sim-7b · openai") {
		t.Errorf("dashboard model %q, want the busiest, sim-7b · openai", chosen)
	}
	// Every axis label inside its chart.
	clipped := browse(t, ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("svg.chart")].flatMap(svg => {
		const box = svg.getBoundingClientRect();
		return [...svg.querySelectorAll("text")].filter(t => { const b = t.getBoundingClientRect(); return b.right > box.right + 0.5 || b.left < box.left - 0.5; })
			.map(t => t.textContent);
	})`))
	if len(clipped) > 0 {
		t.Errorf("dashboard: labels outside their chart: %q", clipped)
	}
	charts := browse(t, ctx, chromedp.Evaluate[map[string]int](`({
			ttft: document.querySelectorAll("#ttft-chart [data-series]").length,
			share: document.querySelectorAll("#share-chart rect[data-series]").length,
			topk: document.querySelectorAll("#topk-chart rect[data-series]").length,
			cache: document.querySelectorAll("#cache-chart [data-series]").length,
			stages: document.querySelectorAll("#stage-table tbody tr").length,
			slow: document.querySelectorAll("#slow-table tbody tr").length,
			prefillPoints: document.querySelectorAll("#prefill-chart circle[data-series=point]").length,
			prefillFit: document.querySelectorAll("#prefill-chart [data-series=fit]").length,
			prefillSpread: document.querySelectorAll("#prefill-chart [data-series=spread]").length,
		})`))
	// The prefill chart: the three answers of sim-7b (the prefill model's
	// window), its fitted line and the band of its spread.
	if charts["ttft"] != 3 || charts["share"] == 0 || charts["topk"] != 12 || charts["cache"] != 1 || charts["stages"] != 9 || charts["slow"] != 3 ||
		charts["prefillPoints"] != 3 || charts["prefillFit"] != 1 || charts["prefillSpread"] != 1 {
		t.Errorf("dashboard elements %v", charts)
	}
	screenshot(t, ctx, "dashboard.png")
	// p99/p50 is red at 5× or more, but not over sub-millisecond figures:
	// an extractive p50 of 0.02 ms and p99 of 4.18 ms is 209× of noise.
	flagged := browse(t, ctx, chromedp.Evaluate[[]bool](`[
			{ttft_p50_ms: 0.02, ttft_p99_ms: 4.18, p99_over_p50: 209},
			{ttft_p50_ms: 0.4, ttft_p99_ms: 0.9, p99_over_p50: 2.25},
			{ttft_p50_ms: 0.5, ttft_p99_ms: 12, p99_over_p50: 24},
			{ttft_p50_ms: 20, ttft_p99_ms: 150, p99_over_p50: 7.5},
			{ttft_p50_ms: 20, ttft_p99_ms: 60, p99_over_p50: 3},
		].map(r => { const d = document.createElement("div"); d.innerHTML = rt.tailRatio(r); return !!d.querySelector(".status-error"); })`))
	if want := []bool{false, false, false, true, false}; !slices.Equal(flagged, want) {
		t.Errorf("p99/p50 flagged red %v, want %v (none under 1 ms, 7.5× over 20 ms)", flagged, want)
	}
	// "all models, pooled" is a choice, and the tables then name each row's model.
	if err := chromedp.Do(ctx, chromedp.Navigate(srv.url+"/dashboard?since=1h&all=1"), chromedp.WaitVisible(chromedp.CSS(`body[data-done="1"]`))); err != nil {
		t.Fatalf("dashboard of all models: %v", err)
	}
	screenshot(t, ctx, "dashboard-all-models.png")
	slowModels := browse(t, ctx, chromedp.Evaluate[int](`new Set([...document.querySelectorAll("#slow-table tbody tr")].map(r => r.children[2].textContent)).size`))
	if slowModels != 2 {
		t.Errorf("dashboard of all models: the slow queries name %d models, want 2", slowModels)
	}

	// The page's own API answers agree with the browser's view.
	resp, err := http.Get(srv.url + "/v1/stats?since=1h")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st pipeline.Stats
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil || st.Totals.Queries != 5 || len(st.Models) != 2 {
		t.Fatalf("stats: %+v, %v", st.Totals, err)
	}
}

// recordExtractive records n extractive queries of the last minutes (TTFT a
// few ms, no model call) through a real Recorder into dbURL.
func recordExtractive(t *testing.T, dbURL string, n int) {
	t.Helper()
	pool, err := postgres.Open(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	rec := postgres.NewRecorder(pool, postgres.RecorderOptions{})
	for i := range n {
		ttft := 2.5 + float64(i)
		rec.Record(ragtime.Record{
			QueryID: uuid.NewString(), CreatedAt: time.Now().Add(-time.Duration(i+2) * time.Minute),
			Question: fmt.Sprintf("extractive question %d", i), QuestionSHA256: fmt.Sprintf("%064x", i),
			TopK: 5, RerankTopN: 3, MaxTokens: 64, Model: "extractive", Provider: "extractive", Status: ragtime.StatusOK,
			Stages: []ragtime.Span{
				{Name: "embed", Seq: 0, DurationMs: 0.2},
				{Name: "search", Seq: 1, StartMs: 0.2, DurationMs: 0.4},
				{Name: "rerank", Seq: 2, StartMs: 0.6, DurationMs: 0.3},
				{Name: "assemble", Seq: 3, StartMs: 0.9, DurationMs: 0.3},
				{Name: "llm_prefill", Seq: 4, StartMs: 1.2, DurationMs: ttft - 1.3},
				{Name: "llm_decode", Seq: 5, StartMs: ttft, DurationMs: 4},
			},
			Figures: ragtime.Figures{TTFTMs: &ttft, FirstTokenMs: &ttft, E2EMs: ttft + 4, RetrievalMs: 1.2, GenTTFTMs: ttft - 1.3,
				LLMPrefillMs: ttft - 1.3, OverheadMs: ptrTo(0.1)},
		})
	}
	if err := rec.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func ptrTo[T any](v T) *T { return &v }

// browse runs one browser action and returns its value, failing the test on
// an error.
func browse[T any](t *testing.T, ctx context.Context, a chromedp.Action[T]) T {
	t.Helper()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		t.Fatalf("browser: %v", err)
	}
	return v
}

// newStoreFor opens a store on the test database.
func newStoreFor(t *testing.T, dbURL string) *postgres.Store {
	t.Helper()
	pool, err := postgres.Open(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return postgres.NewStore(pool)
}

// TestPagesAskForAKey: with keys on, a page asks for one on its first 401,
// keeps it in sessionStorage and sends it with every call, streaming
// answers included (under the pages' Content-Security-Policy).
func TestPagesAskForAKey(t *testing.T) {
	t.Parallel()
	dbURL, _ := testDB(t)
	env := map[string]string{"DATABASE_URL": dbURL}
	dataDir := ingestCorpus(t, env)
	admin := createKey(t, env, "--name", "admin", "--scopes", "admin")
	srv := startServe(t, env, "--data-dir", dataDir)

	ctx := newBrowser(t)
	if err := chromedp.Do(ctx,
		chromedp.Navigate(srv.url+"/queries"),
		chromedp.WaitVisible(chromedp.CSS("#key-form")),
	); err != nil {
		t.Fatalf("the queries page did not ask for a key: %v", err)
	}
	why := browse(t, ctx, chromedp.TextContent(chromedp.CSS("#key-why")))
	if !strings.Contains(why, "auth_missing") {
		t.Errorf("the key form says %q, want the auth_missing code", why)
	}
	if err := chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.CSS("#key-input"), admin.token),
		chromedp.Click(chromedp.CSS(`#key-form button[type="submit"]`)),
		chromedp.WaitVisible(chromedp.CSS("#forget-key")),
	); err != nil {
		t.Fatalf("entering the key: %v", err)
	}
	if n := browse(t, ctx, chromedp.Evaluate[int](`document.querySelectorAll("#key-form").length`)); n != 0 {
		t.Error("the page still asks for a key after getting a valid one")
	}
	if err := chromedp.Do(ctx,
		chromedp.Navigate(srv.url+"/"),
		chromedp.WaitVisible(chromedp.CSS("#question")),
		chromedp.SendKeys(chromedp.CSS("#question"), "what is prefill?"),
		chromedp.Click(chromedp.CSS("#ask-button")),
		chromedp.WaitVisible(chromedp.CSS(`body[data-done]`)),
	); err != nil {
		t.Fatalf("asking with the key: %v", err)
	}
	if done := browse(t, ctx, chromedp.Evaluate[string](`document.body.dataset.done`)); done != "1" {
		errText := browse(t, ctx, chromedp.TextContent(chromedp.CSS("#error")))
		t.Fatalf("the ask page ended with %q: %s", done, errText)
	}
	kept := browse(t, ctx, chromedp.Evaluate[string](`sessionStorage.getItem("ragtime.key")`))
	if kept != admin.token {
		t.Error("the key is not kept in sessionStorage")
	}
	if local := browse(t, ctx, chromedp.Evaluate[int](`localStorage.length`)); local != 0 {
		t.Error("something was written to localStorage")
	}
	if strings.Contains(srv.stderr.String(), admin.token[len(admin.prefix)+1:]) {
		t.Error("the key reached the server log")
	}
}
