package pipeline

import (
	"context"
	"testing"
	"time"

	"ragtime"
)

func TestChooseBudgetKeepsTheLongestPrefixThatFits(t *testing.T) {
	t.Parallel()
	fit := &PrefillFit{Samples: 100, InterceptMs: 0, MsPerToken: 1, RatioP50: 1, RatioP90: 1.5, RatioP95: 2, ConnectP90Ms: 4}
	full := promptParts{promptTokens: 100}
	chunks := []int{20, 20, 20}
	for _, c := range []struct {
		budget        float64
		q             float64
		min           int
		keep          int
		predicted     float64
		prefill       float64
		elapsedMs     int
		wantHeldAfter bool
	}{
		// 10 spent + 0 connect (p50) + 1 ms a token × 1.0
		{budget: 200, q: 0.5, min: 1, keep: 3, predicted: 110, prefill: 100, elapsedMs: 10},
		{budget: 110, q: 0.5, min: 1, keep: 3, predicted: 110, prefill: 100, elapsedMs: 10},
		{budget: 75, q: 0.5, min: 1, keep: 1, predicted: 70, prefill: 60, elapsedMs: 10},
		{budget: 50, q: 0.5, min: 1, keep: 1, predicted: 70, prefill: 60, elapsedMs: 10}, // min_chunks: over the budget
		{budget: 50, q: 0.5, min: 2, keep: 2, predicted: 90, prefill: 80, elapsedMs: 10},
		// at p90: 4 ms connect, prefill × 1.5
		{budget: 110, q: 0.9, min: 1, keep: 1, predicted: 10 + 4 + 90, prefill: 90, elapsedMs: 10},
		// time already spent counts
		{budget: 110, q: 0.5, min: 1, keep: 2, predicted: 30 + 80, prefill: 80, elapsedMs: 30},
	} {
		fit.ConnectP50Ms = 0
		keep, got := chooseBudget(fit, c.q, c.budget, time.Duration(c.elapsedMs)*time.Millisecond, full, chunks, 0, c.min)
		if keep != c.keep || got.predictedMs != c.predicted || got.prefillMs != c.prefill || got.dropped != 3-c.keep {
			t.Errorf("budget %v q %v min %d spent %d ms: keep %d, %+v; want keep %d, predicted %v, prefill %v",
				c.budget, c.q, c.min, c.elapsedMs, keep, got, c.keep, c.predicted, c.prefill)
		}
	}
}

// staticFit is a TTFTPredictor of one fitted model.
type staticFit struct{ fit *PrefillFit }

func (s staticFit) Fit(provider, model string) (PrefillFit, bool) {
	if s.fit == nil {
		return PrefillFit{}, false
	}
	return *s.fit, true
}

// fakeClock moves 1 ms at every reading.
func fakeClock() func() time.Time {
	t := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	return func() time.Time { t = t.Add(time.Millisecond); return t }
}

// runBudget runs one ask with budgetMs against fit, on a fake clock.
func runBudget(t *testing.T, fit *PrefillFit, budgetMs int) (*ragtime.Record, *scriptGenerator) {
	t.Helper()
	now := fakeClock()
	gen := &scriptGenerator{deltas: []Delta{{Text: "x"}}, now: now}
	p, _ := newTestPipeline(t, gen, func(c *Config) {
		c.Now, c.Predictor, c.BudgetQuantile, c.Provider, c.Model = now, staticFit{fit}, 0.5, "p", "m"
	})
	req := request(t, "q", 5, 0)
	req.TTFTBudgetMs = budgetMs
	return p.Run(context.Background(), req, &recStream{}), gen
}

// TestBudgetDropsChunksToFit: on a fake clock and a fitted model, a budget
// that the five ranked chunks' prediction exceeds by two chunks' worth
// keeps the first three, and the record says what was decided.
func TestBudgetDropsChunksToFit(t *testing.T) {
	t.Parallel()
	fit := &PrefillFit{Samples: 100, InterceptMs: 10, MsPerToken: 1, RatioP50: 1, ConnectP50Ms: 2}
	all, gen := runBudget(t, fit, MaxTTFTBudgetMs)
	if len(gen.got.Sources) != 5 || *all.BudgetDropped != 0 || all.BudgetOutcome != BudgetHeld || all.PredictedTTFTMs == nil {
		t.Fatalf("a budget everything fits: %d sources, %+v", len(gen.got.Sources), all.Figures)
	}
	// Each source counts 5 tokens (wordCounter: "[n] T" and three words):
	// two fewer predict 10 ms less.
	budget := int(*all.PredictedTTFTMs) - 10
	if float64(budget)+10 != *all.PredictedTTFTMs {
		t.Fatalf("predicted %v ms on a 1 ms clock: not whole", *all.PredictedTTFTMs)
	}
	for range 2 { // deterministic: the same choice every run
		rec, gen := runBudget(t, fit, budget)
		if len(gen.got.Sources) != 3 || gen.got.Sources[2].ChunkID != "c" {
			t.Fatalf("budget %d: sources %+v; want the first three", budget, gen.got.Sources)
		}
		if *rec.BudgetDropped != 2 || *rec.TTFTBudgetMs != float64(budget) || *rec.PredictedTTFTMs != float64(budget) ||
			*rec.PredictedPrefillMs != *all.PredictedPrefillMs-10 {
			t.Fatalf("budget %d: %+v", budget, rec.Figures)
		}
		if want := BudgetHeld; *rec.TTFTMs > float64(budget) {
			t.Fatalf("ttft %v over budget %d on the fake clock", *rec.TTFTMs, budget)
		} else if rec.BudgetOutcome != want {
			t.Fatalf("outcome %q, want %q", rec.BudgetOutcome, want)
		}
		if asm := rec.Stages[4]; asm.Name != ragtime.StageAssemble || asm.Attrs["chunks"] != 3 || asm.Attrs["dropped"] != 0 {
			t.Fatalf("assemble attrs %v", asm.Attrs)
		}
	}
	// A budget nothing fits keeps min_chunks (1) and misses.
	rec, gen := runBudget(t, fit, 1)
	if len(gen.got.Sources) != 1 || *rec.BudgetDropped != 4 || rec.BudgetOutcome != BudgetMissed {
		t.Fatalf("budget 1 ms: %d sources, %+v", len(gen.got.Sources), rec.Figures)
	}
}

// Without a fitted model nothing is dropped, and the outcome says why.
func TestBudgetWithoutAModel(t *testing.T) {
	t.Parallel()
	for _, fit := range []*PrefillFit{nil, {Samples: MinFitSamples - 1, InterceptMs: 1e6}} {
		rec, gen := runBudget(t, fit, 1)
		if len(gen.got.Sources) != 5 || rec.BudgetOutcome != BudgetUnmodelled || *rec.BudgetDropped != 0 || rec.PredictedTTFTMs != nil {
			t.Fatalf("fit %+v: %d sources, %+v", fit, len(gen.got.Sources), rec.Figures)
		}
	}
	rec, _ := runBudget(t, nil, 0)
	if rec.TTFTBudgetMs != nil || rec.BudgetOutcome != "" || rec.BudgetDropped != nil {
		t.Fatalf("no budget: %+v", rec.Figures)
	}
}

// The cached tokens taken off a prompt are the window's median, at most its
// stable prefix.
func TestPredictPrefillCachesAtMostThePrefix(t *testing.T) {
	t.Parallel()
	fit := PrefillFit{MsPerToken: 1, RatioP90: 1, CachedTokensP50: 300}
	for _, c := range []struct {
		tokens, prefix int
		want           float64
	}{{1000, 50, 950}, {1000, 500, 700}, {100, 500, 0}} {
		if got := fit.PredictPrefillMs(c.tokens, c.prefix, 0.9); got != c.want {
			t.Errorf("%d tokens, prefix %d: %v ms, want %v", c.tokens, c.prefix, got, c.want)
		}
	}
}

// A server that has just slowed down moves the prediction before the line.
func TestPredictPrefillFollowsTheLatestQueries(t *testing.T) {
	t.Parallel()
	fit := PrefillFit{MsPerToken: 1, RatioP50: 1, RatioP90: 1.2}
	if got := fit.PredictPrefillMs(100, 0, 0.9); got != 120 {
		t.Fatalf("no recent figure: %v, want 120", got)
	}
	fit.RecentRatioP50 = 2
	if got := fit.PredictPrefillMs(100, 0, 0.9); got != 240 {
		t.Fatalf("the latest twice as slow: %v, want 240", got)
	}
	fit.RecentRatio = 3 // the replica's own level wins over the view's
	if got := fit.PredictPrefillMs(100, 0, 0.9); got != 360 {
		t.Fatalf("the replica's latest three times as slow: %v, want 360", got)
	}
}

// The overhead the latest queries measured outside the stages counts in the
// predicted TTFT, and can cost a chunk.
func TestChooseBudgetCountsTheRecentOverhead(t *testing.T) {
	t.Parallel()
	fit := &PrefillFit{Samples: 100, MsPerToken: 1, RatioP50: 1, RatioP90: 1, RatioP95: 1}
	full := promptParts{promptTokens: 100}
	if keep, c := chooseBudget(fit, 0.5, 110, 10*time.Millisecond, full, []int{20, 20, 20}, 0, 1); keep != 3 || c.predictedMs != 110 {
		t.Fatalf("no overhead: keep %d, predicted %v; want 3, 110", keep, c.predictedMs)
	}
	fit.RecentOverheadMs = 5
	if keep, c := chooseBudget(fit, 0.5, 110, 10*time.Millisecond, full, []int{20, 20, 20}, 0, 1); keep != 2 || c.predictedMs != 95 {
		t.Fatalf("5 ms overhead: keep %d, predicted %v; want 2, 95", keep, c.predictedMs)
	}
}
