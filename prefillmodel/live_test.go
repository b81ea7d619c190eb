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
	if forwarded != minLatest || math.Abs(after.RecentRatioP50-2) > 0.1 {
		t.Fatalf("forwarded %d; recent ratio %v after %d queries twice as slow (before %v); want about 2", forwarded, after.RecentRatioP50, minLatest, before.RecentRatioP50)
	}
	if p0, p1 := before.PredictPrefillMs(1000, 0, 0.5), after.PredictPrefillMs(1000, 0, 0.5); math.Abs(p1/p0-2) > 0.15 {
		t.Fatalf("prediction %v → %v; want it doubled", p0, p1)
	}
}

type recorderFunc func(ragtime.Record)

func (f recorderFunc) Record(rec ragtime.Record) { f(rec) }
