package prefillmodel

import (
	"context"
	"log/slog"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"ragtime"
	"ragtime/pipeline"
	"ragtime/postgres"
	"ragtime/postgres/postgrestest"
)

// record stores n queries of provider/model whose llm_prefill_ms is
// prefill(tokens), through the real recorder.
func record(t *testing.T, rec *postgres.Recorder, provider, model string, n int, prefill func(tokens int, r *rand.Rand) float64) {
	t.Helper()
	r := rand.New(rand.NewPCG(1, 2))
	now := time.Now()
	for i := range n {
		tokens := 300 + r.IntN(3300)
		cached := 100
		p := prefill(tokens-cached, r)
		connect := 0.2 + r.Float64()*0.1
		rec.Record(ragtime.Record{
			QueryID: uuid.Must(uuid.NewV7()).String(), CreatedAt: now.Add(-time.Duration(n-i) * time.Second).UTC(),
			QuestionSHA256: strings.Repeat("ab", 32), TopK: 5, MaxTokens: 16, Model: model, Provider: provider, Status: ragtime.StatusOK,
			Figures: ragtime.Figures{LLMPrefillMs: p, GenTTFTMs: p + connect, Usage: ragtime.Usage{PromptTokens: tokens, CachedTokens: &cached}},
		})
	}
}

// TestLiveFitsThroughOutliers: queries whose prefill is 20 ms + 0.5 ms a
// token (uncached), ±5 %, one in ten of them ten times slower, recorded in
// a real Postgres: the model read back predicts the clean ones within 5 %
// at the median.
func TestLiveFitsThroughOutliers(t *testing.T) {
	t.Parallel()
	pool := postgrestest.NewPool(t)
	rec := postgres.NewRecorder(pool, postgres.RecorderOptions{Logger: slog.New(slog.DiscardHandler)})
	truth := func(x int) float64 { return 20 + 0.5*float64(x) }
	record(t, rec, "openai", "m", 300, func(x int, r *rand.Rand) float64 {
		y := truth(x) * (0.95 + 0.1*r.Float64())
		if r.IntN(10) == 0 {
			y *= 10
		}
		return y
	})
	record(t, rec, "openai", "fast", 10, func(x int, _ *rand.Rand) float64 { return 1 })
	if err := rec.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	live := New(postgres.NewStore(pool))
	if _, ok := live.Fit("openai", "m"); ok {
		t.Fatal("a fit before the first refresh")
	}
	if err := live.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	fit, ok := live.Fit("openai", "m")
	if !ok {
		t.Fatalf("no fit for openai/m; have %+v", live.Fits())
	}
	if fit.Samples != 256 || fit.CachedTokensP50 != 100 {
		t.Errorf("window of %d samples, cached p50 %v; want the last 256, 100", fit.Samples, fit.CachedTokensP50)
	}
	if math.Abs(fit.MsPerToken-0.5) > 0.05 || math.Abs(fit.InterceptMs-20) > 30 {
		t.Errorf("fit %.3f ms/token + %.1f ms; want about 0.5 and 20", fit.MsPerToken, fit.InterceptMs)
	}
	var errs []float64
	for x := 300; x <= 3500; x += 100 {
		pred := fit.PredictPrefillMs(x+100, 150, 0.5) // 100 of the prompt's tokens cached, of a prefix of 150
		errs = append(errs, math.Abs(pred-truth(x))/truth(x))
	}
	slices.Sort(errs)
	if med := errs[len(errs)/2]; med > 0.05 {
		t.Errorf("median relative error %.3f against the clean line; want ≤ 0.05", med)
	}
	if !(fit.RatioP50 < fit.RatioP90 && fit.RatioP90 <= fit.RatioP95) || fit.ConnectP50Ms < 0.2 || fit.ConnectP95Ms > 0.31 {
		t.Errorf("spread %+v", fit)
	}
	if f, ok := live.Fit("openai", "fast"); !ok || f.Samples != 10 {
		t.Errorf("the second model: %+v, %v", f, ok)
	}
	if _, ok := live.Fit("other", "m"); ok {
		t.Error("a fit for a provider with no queries")
	}
}

// TestObserveFollowsTheServer: once the replica's own queries run twice as
// slow as the fit, Fit says so after a few of them, without a refresh.
func TestObserveFollowsTheServer(t *testing.T) {
	t.Parallel()
	pool := postgrestest.NewPool(t)
	rec := postgres.NewRecorder(pool, postgres.RecorderOptions{Logger: slog.New(slog.DiscardHandler)})
	record(t, rec, "openai", "m", 64, func(x int, _ *rand.Rand) float64 { return 10 + 0.1*float64(x) })
	if err := rec.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	live := New(postgres.NewStore(pool))
	if err := live.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	before, _ := live.Fit("openai", "m")
	var forwarded int
	r := live.Recorder(recorderFunc(func(ragtime.Record) { forwarded++ }))
	cached := 0
	for i := range minLatest {
		x := 500 + 100*i
		r.Record(ragtime.Record{Provider: "openai", Model: "m", Status: ragtime.StatusOK,
			Figures: ragtime.Figures{LLMPrefillMs: 2 * (10 + 0.1*float64(x)), Usage: ragtime.Usage{PromptTokens: x, CachedTokens: &cached}}})
	}
	after, _ := live.Fit("openai", "m")
	if forwarded != minLatest || math.Abs(after.RecentRatio-2) > 0.1 {
		t.Fatalf("forwarded %d; recent ratio %v after %d queries twice as slow (before %v); want about 2", forwarded, after.RecentRatio, minLatest, before.RecentRatio)
	}
	if p0, p1 := before.PredictPrefillMs(1000, 0, 0.5), after.PredictPrefillMs(1000, 0, 0.5); math.Abs(p1/p0-2) > 0.15 {
		t.Fatalf("prediction %v → %v; want it doubled", p0, p1)
	}
}

type recorderFunc func(ragtime.Record)

func (f recorderFunc) Record(rec ragtime.Record) { f(rec) }

// fixedSource is a Source of one fit, as the view would read it.
type fixedSource struct{ fit pipeline.PrefillFit }

func (s *fixedSource) PrefillModel(context.Context) ([]pipeline.PrefillFit, error) {
	return []pipeline.PrefillFit{s.fit}, nil
}

// TestLevelReactsFastToSlowdownsSlowlyToSpeedups drives the replica's
// level with synthetic records (no clock, no storage): after the prefill
// cost doubles, the prediction doubles within riseQueries queries; one
// slow outlier moves nothing; a speedup lowers it only once half the slow
// window is fast; a refresh of the line that already holds the slowdown
// does not count it twice; the overhead is the ring's 0.9 quantile.
func TestLevelReactsFastToSlowdownsSlowlyToSpeedups(t *testing.T) {
	src := &fixedSource{pipeline.PrefillFit{Provider: "openai", Model: "m", Samples: 64,
		InterceptMs: 10, MsPerToken: 0.1, RatioP50: 1, RatioP90: 1.05, RatioP95: 1.1}}
	live := New(src)
	if err := live.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	cost := 1.0
	n := 0
	ask := func(overheadMs float64) {
		n++
		x := 400 + 50*(n%7)
		over := overheadMs
		live.Observe(ragtime.Record{Provider: "openai", Model: "m", Status: ragtime.StatusOK,
			Figures: ragtime.Figures{LLMPrefillMs: cost * (10 + 0.1*float64(x)), OverheadMs: &over,
				Usage: ragtime.Usage{PromptTokens: x}}})
	}
	predict := func() float64 {
		f, ok := live.Fit("openai", "m")
		if !ok {
			t.Fatal("no fit")
		}
		return f.PredictPrefillMs(1000, 0, 0.5)
	}
	base := predict() // 110 ms: no queries of our own yet
	if base != 110 {
		t.Fatalf("prediction before any query %v; want 110", base)
	}
	for range slowWindow {
		ask(1)
	}
	if p := predict(); math.Abs(p/base-1) > 0.01 {
		t.Fatalf("steady: %v; want %v", p, base)
	}
	// One outlier (a GC pause, a neighbour's burst) is not a slowdown.
	cost = 10
	ask(1)
	cost = 1
	if p := predict(); math.Abs(p/base-1) > 0.01 {
		t.Fatalf("after one outlier: %v; want %v", p, base)
	}
	ask(1)
	// The cost doubles: within riseQueries queries, so does the prediction.
	cost = 2
	for i := range riseQueries {
		if p := predict(); math.Abs(p/base-1) > 0.01 {
			t.Fatalf("after %d slow queries: %v; want still %v", i, p, base)
		}
		ask(1)
	}
	if p := predict(); math.Abs(p/base-2) > 0.01 {
		t.Fatalf("after %d queries twice as slow: %v; want %v", riseQueries, p, 2*base)
	}
	for range slowWindow {
		ask(1)
	}
	// It speeds up again: the level stays up while fewer than half the
	// slow window are fast (one fast query is not a speedup), then
	// follows the median.
	cost = 1
	for i := range slowWindow/2 - 1 {
		ask(1)
		if p := predict(); math.Abs(p/base-2) > 0.01 {
			t.Fatalf("after %d fast queries: %v; want still %v", i+1, p, 2*base)
		}
	}
	ask(1)
	ask(1)
	if p := predict(); math.Abs(p/base-1) > 0.01 {
		t.Fatalf("after %d fast queries: %v; want %v", slowWindow/2+1, p, base)
	}
	// The view's line catches up with a slowdown: the latest queries are
	// read against the new line, so the slowdown is not counted twice.
	cost = 2
	for range slowWindow {
		ask(1)
	}
	src.fit.InterceptMs, src.fit.MsPerToken = 20, 0.2
	if err := live.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	if p := predict(); math.Abs(p/base-2) > 0.01 {
		t.Fatalf("after the line's refresh: %v; want %v", p, 2*base)
	}
	// Overhead: the 0.9 quantile of the ring's overhead_ms.
	for i := range ringSize {
		ask(float64(i + 1))
	}
	if f, _ := live.Fit("openai", "m"); f.RecentOverheadMs != 15 {
		t.Fatalf("overhead %v over 1..16 ms; want 15 (the 0.9 quantile)", f.RecentOverheadMs)
	}
}
