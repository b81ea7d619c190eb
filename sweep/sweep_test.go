package sweep

import (
	"bytes"
	"context"
	"encoding/xml"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"ragtime"
	"ragtime/internal/golden"
	"ragtime/pipeline"
)

func TestPercentileMatchesPercentileCont(t *testing.T) {
	t.Parallel()
	// Values PostgreSQL's percentile_cont gives for these inputs.
	xs := []float64{1, 2, 3, 4, 10}
	for _, c := range []struct{ p, want float64 }{{0, 1}, {0.5, 3}, {0.95, 8.8}, {1, 10}, {0.25, 2}} {
		if got := Percentile(xs, c.p); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("Percentile(%v) = %v, want %v", c.p, got, c.want)
		}
	}
	if got := Percentile([]float64{7}, 0.95); got != 7 {
		t.Errorf("one value: %v", got)
	}
	if !math.IsNaN(Percentile(nil, 0.5)) {
		t.Error("no values should be NaN")
	}
}

func TestScoreCountsDocumentsNotChunks(t *testing.T) {
	t.Parallel()
	s := Sample{Docs: distinctDocs([]string{"a", "a", "b", "c", "b"})}
	if strings.Join(s.Docs, ",") != "a,b,c" {
		t.Fatalf("docs %v", s.Docs)
	}
	s.score([]string{"c", "z"})
	if *s.Hit != 1 || *s.Recall != 0.5 || math.Abs(*s.RR-1.0/3) > 1e-12 {
		t.Errorf("hit %v recall %v rr %v", *s.Hit, *s.Recall, *s.RR)
	}
	s.score([]string{"z"})
	if *s.Hit != 0 || *s.Recall != 0 || *s.RR != 0 {
		t.Errorf("miss: hit %v recall %v rr %v", *s.Hit, *s.Recall, *s.RR)
	}
	u := Sample{Docs: []string{"a"}}
	u.score(nil)
	if u.Hit != nil || u.Recall != nil || u.RR != nil {
		t.Error("unlabelled question got relevance figures")
	}
}

func f(x float64) *float64 { return &x }

func TestRecommend(t *testing.T) {
	t.Parallel()
	res := func(k int, recall *float64, p95 float64) Result {
		return Result{Setting: Setting{TopK: k, RerankTopN: k}, OK: 40, TTFTP95Ms: p95, Recall: recall}
	}
	few := func(r Result, ok int) Result { r.OK = ok; return r }
	cases := []struct {
		name      string
		results   []Result
		tol, budg float64
		want      int // 0: none
		why       string
	}{
		{"smallest within tolerance", []Result{res(1, f(0.5), 10), res(4, f(0.89), 20), res(8, f(0.90), 40), res(16, f(0.91), 80)}, 0.02, 0, 4, "within 0.02 of the best (0.910"},
		{"tolerance zero picks the best", []Result{res(1, f(0.5), 10), res(4, f(0.89), 20), res(16, f(0.91), 80)}, 0, 0, 16, "smallest k"},
		{"budget excludes", []Result{res(1, f(0.5), 10), res(4, f(0.90), 60), res(8, f(0.90), 40)}, 0.02, 50, 8, "under the 50 ms budget"},
		{"nothing under budget", []Result{res(1, f(0.5), 100), res(4, f(0.9), 200)}, 0.02, 50, 0, "raise --ttft-budget-ms"},
		{"no labels", []Result{res(2, nil, 10), res(1, nil, 20)}, 0.02, 0, 1, "no relevance labels"},
		{"unmeasured settings skipped", []Result{{Setting: Setting{TopK: 1}}, res(4, f(0.9), 20)}, 0.02, 0, 4, ""},
		{"nothing measured", []Result{{Setting: Setting{TopK: 1}}}, 0.02, 0, 0, "no setting has a successful query"},
		{"a smaller k no faster", []Result{res(4, f(0.89), 0.42), res(8, f(0.93), 0.41)}, 0, 0, 8, "k=4 measured no faster at p95 and loses 0.040 recall"},
		{"a smaller k faster", []Result{res(4, f(0.89), 0.2), res(8, f(0.93), 0.41)}, 0, 0, 8, "k=4 would save 0.2 ms at p95 but lose 0.040 recall"},
		// 18 ok queries per setting (a loaded machine, 3 runs): the p95 is
		// the slowest query, so the advice is more runs, not a stage.
		{"nothing under budget on too few samples", []Result{few(res(1, f(0.5), 100), 18), few(res(4, f(0.9), 200), 20)}, 0.02, 50, 0,
			"rest on as few as 18 ok queries (k=1 rerank=1); a p95 needs 40, 2 beyond it, or it is the slowest query or two: rerun with --runs 7 or more"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := Recommend(c.results, c.tol, c.budg, 3)
			got := 0
			if r.Setting != nil {
				got = r.Setting.TopK
			}
			if got != c.want || !strings.Contains(r.Why, c.why) {
				t.Errorf("recommended k=%d (%s), want k=%d and %q", got, r.Why, c.want, c.why)
			}
		})
	}
}

// TestFewSamplesWarn: a p95 over fewer than 40 ok queries is flagged, with
// the --runs that would give every setting enough; 40 are enough.
func TestFewSamplesWarn(t *testing.T) {
	t.Parallel()
	res := []Result{{Setting: Setting{TopK: 2}, OK: 18}, {Setting: Setting{TopK: 4}, OK: 20}, {Setting: Setting{TopK: 8}}}
	w := sampleWarnings(res, 3)
	if len(w) != 1 || !strings.Contains(w[0], "as few as 18 ok queries (k=2") || !strings.Contains(w[0], "--runs 7 or more") {
		t.Errorf("warnings %q, want one naming k=2's 18 queries and --runs 7", w)
	}
	res[0].OK, res[1].OK = 40, 41
	if w := sampleWarnings(res, 3); len(w) != 0 {
		t.Errorf("warnings %q for 40 ok queries", w)
	}
	if MinSamples(0.95) != 40 || MinSamples(0.99) != 200 || MinSamples(0.5) != 4 {
		t.Errorf("MinSamples: p95 %d, p99 %d, p50 %d", MinSamples(0.95), MinSamples(0.99), MinSamples(0.5))
	}
}

func TestSummarizeAndStacks(t *testing.T) {
	t.Parallel()
	st := Setting{TopK: 2, RerankTopN: 2}
	var samples []Sample
	for i := range 20 {
		ttft := float64(10 + i)
		samples = append(samples, Sample{Setting: st, Status: "ok", TTFTMs: ttft, RetrievalMs: 1, LLMPrefillMs: ttft - 2,
			PromptTokens: 100 + i, Stages: Breakdown{Retrieval: 1, LLMConnect: 0.5, LLMPrefill: ttft - 2, Other: 0.5}})
	}
	samples = append(samples, Sample{Setting: st, Status: "error"}, Sample{Setting: Setting{TopK: 9}, Status: "ok", TTFTMs: 1})
	res := Summarize([]Setting{st, {TopK: 3}}, samples)
	r := res[0]
	if r.Queries != 21 || r.OK != 20 || r.Failed != 1 || r.TTFTP50Ms != 19.5 || r.TTFTP95Ms != 28.05 || r.PromptTokensMean != 109.5 {
		t.Errorf("result %+v", r)
	}
	for _, c := range []struct {
		b Breakdown
		v float64
	}{{r.Stack50, r.TTFTP50Ms}, {r.Stack95, r.TTFTP95Ms}} {
		if math.Abs(c.b.Total()-c.v) > 0.005 || c.b.LLMPrefill <= c.b.Retrieval {
			t.Errorf("stack %+v does not split %.3f", c.b, c.v)
		}
	}
	if r.Recall != nil {
		t.Error("recall without labels")
	}
	if res[1].Queries != 0 || res[1].OK != 0 {
		t.Errorf("empty setting %+v", res[1])
	}
}

func TestScheduleIsSeededAndComplete(t *testing.T) {
	t.Parallel()
	cfg := Config{Params: Params{Settings: []Setting{{TopK: 1}, {TopK: 2}, {TopK: 4}}, Runs: 3, Seed: 7},
		Questions: []Question{{Text: "a"}, {Text: "b"}}}
	a, b := cfg.schedule(), cfg.schedule()
	cfg.Seed = 8
	c := cfg.schedule()
	if len(a) != 18 {
		t.Fatalf("%d jobs", len(a))
	}
	same, differ := true, false
	seen := map[job]bool{}
	for i := range a {
		same = same && a[i] == b[i]
		differ = differ || a[i].setting != c[i].setting || a[i].question != c[i].question
		if a[i].order != i+1 {
			t.Errorf("job %d has order %d", i, a[i].order)
		}
		k := a[i]
		k.order = 0
		seen[k] = true
	}
	if !same || !differ || len(seen) != 18 {
		t.Errorf("same seed same order %v, other seed other order %v, distinct jobs %d", same, differ, len(seen))
	}
	// Shuffled: the first six jobs are not all one setting, as they would be in order.
	first := map[Setting]bool{}
	for _, j := range a[:6] {
		first[j.setting] = true
	}
	if len(first) == 1 {
		t.Errorf("the first six jobs all ask %v: not shuffled", a[0].setting)
	}
}

// fakeAsker answers every question with a fixed record, as a pipeline
// whose retrieval finds the first k of a fixed ranking would.
type fakeAsker struct{ ranking []string }

func (a fakeAsker) Run(ctx context.Context, req *pipeline.Request, out pipeline.Stream) *ragtime.Record {
	var src []pipeline.Source
	for i := range min(req.TopK, len(a.ranking)) {
		src = append(src, pipeline.Source{Rank: i + 1, DocID: a.ranking[i]})
	}
	_ = out.Sources(src)
	ttft := float64(10 * req.TopK)
	return &ragtime.Record{
		QueryID: "q",
		Status:  ragtime.StatusOK,
		Figures: ragtime.Figures{
			TTFTMs:       &ttft,
			LLMPrefillMs: ttft - 1,
			GenTTFTMs:    ttft - 1,
			RetrievalMs:  1,
			OverheadMs:   f(0),
			Usage:        ragtime.Usage{PromptTokens: 50 * req.TopK},
		},
	}
}

func TestRunWritesTableAndFiles(t *testing.T) {
	t.Parallel()
	cfg := Config{
		Params: Params{Settings: []Setting{{TopK: 1, RerankTopN: 1}, {TopK: 2, RerankTopN: 2}, {TopK: 4, RerankTopN: 4}},
			Runs: 2, Concurrency: 2, Seed: 1, RecallTolerance: 0.02},
		Mode:      ModeInProcess,
		Questions: []Question{{Text: "a", Relevant: []string{"y", "z"}}, {Text: "b"}},
		Asker:     fakeAsker{ranking: []string{"x", "y", "y", "z"}},
	}
	rep, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Measured != 12 || rep.Status != StatusDone {
		t.Fatalf("measured %d, status %s", rep.Measured, rep.Status)
	}
	want := []float64{0, 0.5, 1} // y at k=2, y and z at k=4 (the ranking repeats y)
	for i, s := range rep.Settings {
		if s.Recall == nil || *s.Recall != want[i] || s.Labelled != 2 {
			t.Errorf("%s: recall %v over %d, want %v over 2", s.Setting, s.Recall, s.Labelled, want[i])
		}
	}
	if rep.Recommendation.Setting == nil || rep.Recommendation.Setting.TopK != 4 {
		t.Errorf("recommendation %+v", rep.Recommendation)
	}
	var buf bytes.Buffer
	if err := rep.WriteTable(&buf); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "recommended: top_k=4") || strings.Count(buf.String(), "\n") < 5 {
		t.Errorf("table:\n%s", buf.String())
	}
	golden.Check(t, "report_table.golden", buf.Bytes())
	dir := filepath.Join(t.TempDir(), "out")
	files, err := rep.WriteFiles(dir)
	if err != nil || len(files) != 4 {
		t.Fatalf("wrote %v, %v", files, err)
	}
	svg, _ := os.ReadFile(filepath.Join(dir, ChartSVG))
	if err := xml.Unmarshal(svg, new(struct{ XMLName xml.Name })); err != nil || !bytes.Contains(svg, []byte("recall@k")) {
		t.Errorf("chart.svg (%d bytes) is not XML (%v) or lacks recall@k", len(svg), err)
	}
	// The legend sits under the plot, below the x axis' title, not on
	// the bars (SVG's y grows downwards: the title has the smallest).
	ys := map[string]float64{}
	for _, m := range regexp.MustCompile(`<text x="[-0-9.]+" y="([-0-9.]+)"[^>]*>([^<]+)</text>`).FindAllSubmatch(svg, -1) {
		y, _ := strconv.ParseFloat(string(m[1]), 64)
		ys[string(m[2])] = y
	}
	axis, okAxis := ys["top_k"]
	legend, okLegend := ys["recall@k (right axis)"]
	if !okAxis || !okLegend || legend <= axis || ys["TTFT by stage against top-k: left bar p50, right bar p95 (lighter)"] >= axis {
		t.Errorf("the legend (y %v) is not under the x axis title (y %v): %v", legend, axis, ys)
	}
	// Two bars per setting, each a stack of the stages that took time.
	var bars int
	for _, s := range rep.Settings {
		for _, b := range []Breakdown{s.Stack50, s.Stack95} {
			for _, v := range []float64{b.Retrieval, b.LLMConnect, b.LLMPrefill, b.Other} {
				if v > 0 {
					bars++
				}
			}
		}
	}
	if got := bytes.Count(svg, []byte("<rect ")) - 1 - len(stageColors); got != bars || bars == 0 {
		t.Errorf("chart has %d bar segments, want %d", got, bars)
	}
	if got := bytes.Count(svg, []byte("<circle ")) - 1; got != len(rep.Settings) {
		t.Errorf("chart has %d recall points, want %d", got, len(rep.Settings))
	}
}

func TestRunFailsOnWarmUpError(t *testing.T) {
	t.Parallel()
	cfg := Config{Params: Params{Settings: []Setting{{TopK: 1}}, Runs: 1, Concurrency: 1}, Mode: ModeInProcess,
		Questions: []Question{{Text: "a"}}, Asker: failingAsker{}}
	_, err := Run(context.Background(), cfg)
	if err == nil || !strings.Contains(err.Error(), "warm-up query at k=1 rerank=0 failed: llm_unreachable") {
		t.Errorf("err = %v", err)
	}
}

type failingAsker struct{}

func (failingAsker) Run(ctx context.Context, req *pipeline.Request, out pipeline.Stream) *ragtime.Record {
	return &ragtime.Record{Status: ragtime.StatusError, ErrorCode: "llm_unreachable", ErrorMessage: "connection refused"}
}

// cacheAsker stands for a server with a prefix cache: a prompt is its
// nonce, question and k, after a 20-token system prompt; a prompt seen
// before is served from the cache but for its last token, a new one has
// only the system prompt cached. It keeps every nonce it was sent.
type cacheAsker struct {
	mu     sync.Mutex
	seen   map[string]bool
	nonces []string
}

func (a *cacheAsker) Run(ctx context.Context, req *pipeline.Request, out pipeline.Stream) *ragtime.Record {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.nonces = append(a.nonces, req.PromptNonce)
	key := fmt.Sprintf("%s|%s|%d", req.PromptNonce, req.Question, req.TopK)
	prompt, cached := 20+100*req.TopK, 20
	if a.seen[key] {
		cached = prompt - 1
	}
	a.seen[key] = true
	ttft := float64(prompt-cached) / 10
	return &ragtime.Record{QueryID: "q", Status: ragtime.StatusOK, Figures: ragtime.Figures{TTFTMs: &ttft, LLMPrefillMs: ttft, GenTTFTMs: ttft,
		OverheadMs: f(0), Usage: ragtime.Usage{PromptTokens: prompt, CachedTokens: &cached}}}
}

// TestSweepMeasuresColdPrefillsByDefault: every measured query carries its
// own nonce (so it shares at most the system prompt with what was sent
// before it), the cached share is in the table, files and chart, and
// --warm-cache, which repeats prompts, is warned about per setting.
func TestSweepMeasuresColdPrefillsByDefault(t *testing.T) {
	t.Parallel()
	settings := []Setting{{TopK: 1, RerankTopN: 1}, {TopK: 4, RerankTopN: 4}}
	run := func(warm bool) (*Report, *cacheAsker) {
		a := &cacheAsker{seen: map[string]bool{}}
		cfg := Config{Params: Params{Settings: settings, Runs: 3, Concurrency: 1, Seed: 7, WarmCache: warm},
			Mode: ModeInProcess, Questions: []Question{{Text: "a"}, {Text: "b"}}, Asker: a}
		rep, err := Run(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		return rep, a
	}

	rep, a := run(false)
	seen := map[string]bool{}
	for _, n := range a.nonces {
		if n == "" || seen[n] {
			t.Errorf("nonce %q is empty or was sent twice: %q", n, a.nonces)
		}
		seen[n] = true
	}
	// 6 ok queries per setting: the only warning is that a p95 needs more.
	cacheWarned := func(ws []string) (n int) {
		for _, w := range ws {
			if strings.Contains(w, "prefix cache") {
				n++
			}
		}
		return n
	}
	if len(rep.Warnings) != 1 || cacheWarned(rep.Warnings) != 0 || !strings.Contains(rep.Warnings[0], "as few as 6 ok queries") {
		t.Errorf("cold sweep warned: %q", rep.Warnings)
	}
	for _, s := range rep.Settings {
		want := round4(20 / float64(20+100*s.TopK)) // the system prompt alone
		if s.CachedShare == nil || *s.CachedShare != want || s.CacheHits != 0 || s.CacheKnown != 6 {
			t.Errorf("%s: cached share %v, %d hits of %d, want %v, 0 of 6", s.Setting, s.CachedShare, s.CacheHits, s.CacheKnown, want)
		}
	}

	rep, a = run(true)
	for _, n := range a.nonces {
		if n != "" {
			t.Fatalf("--warm-cache sent nonce %q", n)
		}
	}
	if cacheWarned(rep.Warnings) != 2 {
		t.Fatalf("warm sweep: %d cache warnings, want one per setting: %q", cacheWarned(rep.Warnings), rep.Warnings)
	}
	for _, s := range rep.Settings {
		// runs 2 and 3 of each question hit; run 1 of k=1 follows the warm-up
		if !s.MostlyCached() || s.CacheHits < 4 {
			t.Errorf("%s: %d cache hits of %d, want runs 2 and 3 at least", s.Setting, s.CacheHits, s.CacheKnown)
		}
	}
	var buf bytes.Buffer
	if err := rep.WriteTable(&buf); err != nil {
		t.Fatal(err)
	}
	table := buf.String()
	if !strings.Contains(table, "cached") || !strings.Contains(table, "warning: k=4 rerank=4:") || !strings.Contains(table, "prefix cache") {
		t.Errorf("table lacks the cached column or the warning:\n%s", table)
	}
	dir := t.TempDir()
	if _, err := rep.WriteFiles(dir); err != nil {
		t.Fatal(err)
	}
	results, _ := os.ReadFile(filepath.Join(dir, ResultsCSV))
	samples, _ := os.ReadFile(filepath.Join(dir, SamplesCSV))
	js, _ := os.ReadFile(filepath.Join(dir, ReportJSON))
	svg, _ := os.ReadFile(filepath.Join(dir, ChartSVG))
	if !bytes.Contains(results, []byte("cached_share,cache_hits")) || !bytes.Contains(samples, []byte(",cached_tokens,")) ||
		!bytes.Contains(js, []byte(`"warnings"`)) || !bytes.Contains(svg, []byte("cached")) {
		t.Errorf("the files lack the cached share: results.csv %q…, samples.csv %q…", results[:min(len(results), 200)], samples[:min(len(samples), 200)])
	}
}

// TestCachedShareUnknown: a server that reports no cached tokens (Ollama)
// gives an unknown share, not 0 %.
func TestCachedShareUnknown(t *testing.T) {
	t.Parallel()
	st := Setting{TopK: 2}
	var samples []Sample
	for range 3 {
		samples = append(samples, Sample{Setting: st, Status: "ok", TTFTMs: 5, PromptTokens: 300})
	}
	res := Summarize([]Setting{st}, samples)
	if res[0].CachedShare != nil || res[0].MostlyCached() {
		t.Errorf("cached share %v with no server figure, want nil (unknown)", res[0].CachedShare)
	}
	rep := &Report{Settings: res}
	var buf bytes.Buffer
	if err := rep.WriteTable(&buf); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "unknown") {
		t.Errorf("table:\n%s", buf.String())
	}
}

// TestProgressQuietWhenFast: plain progress lines appear only once a sweep
// has run for a second; a sub-second sweep prints none.
func TestProgressQuietWhenFast(t *testing.T) {
	t.Parallel()
	at := time.Unix(0, 0)
	var fast, slow strings.Builder
	p := progressBar(&fast, false, func() time.Time { return at })
	for i := 1; i <= 20; i++ {
		p(i, 20)
	}
	if fast.Len() != 0 {
		t.Errorf("a sweep over at once printed:\n%s", fast.String())
	}
	clock := at
	p = progressBar(&slow, false, func() time.Time { return clock })
	for i := 1; i <= 20; i++ {
		clock = clock.Add(200 * time.Millisecond)
		p(i, 20)
	}
	if n := strings.Count(slow.String(), "\n"); n < 5 || !strings.Contains(slow.String(), "measured 20/20 queries, 4s") {
		t.Errorf("a 4 s sweep printed %d lines:\n%s", n, slow.String())
	}
}

// TestBudgetHalvesAndRecommendation: each setting's p95 is split by the
// schedule's halves, a TTFT budget's setting counts what held and what it
// dropped, and the recommendation is a fixed top_k even when the budget's
// setting is faster at the same recall.
func TestBudgetHalvesAndRecommendation(t *testing.T) {
	t.Parallel()
	fixed, budget := Setting{TopK: 4}, Setting{TopK: 8, TTFTBudgetMs: 100}
	one := 1.0
	var samples []Sample
	for i := range 20 {
		order := 2*i + 1
		ttft := 50.0
		if 2*order > 40 {
			ttft = 150 // the server slowed down in the second half
		}
		samples = append(samples,
			Sample{Setting: fixed, Order: order, Status: "ok", TTFTMs: ttft, Hit: &one, Recall: &one, RR: &one},
			Sample{Setting: budget, Order: order + 1, Status: "ok", TTFTMs: 60, Hit: &one, Recall: &one, RR: &one,
				BudgetOutcome: "held", BudgetDropped: i % 3})
	}
	res := Summarize([]Setting{fixed, budget}, samples)
	f, b := res[0], res[1]
	if f.TTFTP95FirstHalfMs == nil || *f.TTFTP95FirstHalfMs != 50 || f.TTFTP95SecondHalfMs == nil || *f.TTFTP95SecondHalfMs != 150 {
		t.Errorf("fixed halves %v / %v, want 50 / 150", f.TTFTP95FirstHalfMs, f.TTFTP95SecondHalfMs)
	}
	if f.RecallFirstHalf == nil || *f.RecallFirstHalf != 1 || b.RecallSecondHalf == nil || *b.RecallSecondHalf != 1 {
		t.Errorf("recall by half: fixed first %v, budget second %v, want 1", f.RecallFirstHalf, b.RecallSecondHalf)
	}
	if b.BudgetHeld != 20 || b.BudgetDroppedMean != 0.95 || f.BudgetHeld != 0 || f.BudgetDroppedMean != 0 {
		t.Errorf("budget held %d, dropped %.2f; fixed %d, %.2f", b.BudgetHeld, b.BudgetDroppedMean, f.BudgetHeld, f.BudgetDroppedMean)
	}
	rec := Recommend(res, 0.02, 0, 1)
	if rec.Setting == nil || *rec.Setting != fixed {
		t.Errorf("recommended %v, want the fixed k=4", rec.Setting)
	}
	rep := &Report{Params: Params{Settings: []Setting{fixed, budget}}, Settings: res, Recommendation: rec}
	var out strings.Builder
	if err := rep.WriteTable(&out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"fixed top_k against a TTFT budget", "ttft_budget_ms 100 (top_k ≤ 8)", "150.0 ms", "20/20", "0.95"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
}
