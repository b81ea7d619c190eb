package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"ragtime/pipeline"
	"ragtime/prefillmodel"
)

// budgetConfig holds serve's TTFT budget flags.
type budgetConfig struct {
	budgetMs int
	quantile float64
	refresh  time.Duration
}

func (c *budgetConfig) register(fs *flag.FlagSet) {
	fs.IntVar(&c.budgetMs, "ttft-budget-ms", 0, fmt.Sprintf("ttft_budget_ms of an ask that gives none: the context keeps the longest prefix of the ranked chunks whose predicted TTFT fits it, never fewer than min_chunks (0: off; at most %d; docs/ttft.md)", pipeline.MaxTTFTBudgetMs))
	fs.Float64Var(&c.quantile, "ttft-budget-quantile", 0.9, "quantile of the prefill model's spread a TTFT budget predicts at: 0.5, 0.9 or 0.95")
	fs.DurationVar(&c.refresh, "prefill-model-refresh", 10*time.Second, "how often this replica rereads the prefill model (the prefill_model view) from Postgres")
}

func (c *budgetConfig) valid(problems map[string]string) {
	if c.budgetMs < 0 || c.budgetMs > pipeline.MaxTTFTBudgetMs {
		problems["ttft-budget-ms"] = fmt.Sprintf("--ttft-budget-ms must be between 0 (off) and %d, got %d", pipeline.MaxTTFTBudgetMs, c.budgetMs)
	}
	if !slices.Contains(pipeline.BudgetQuantiles, c.quantile) {
		problems["ttft-budget-quantile"] = fmt.Sprintf("--ttft-budget-quantile must be 0.5, 0.9 or 0.95, got %g", c.quantile)
	}
	if c.refresh < time.Second {
		problems["prefill-model-refresh"] = fmt.Sprintf("--prefill-model-refresh must be at least 1s, got %s", c.refresh)
	}
}

// live starts the replica's prefill model, refreshed from src until ctx
// ends.
func (c *budgetConfig) live(ctx context.Context, src prefillmodel.Source, log *slog.Logger) *prefillmodel.Live {
	l := prefillmodel.New(src)
	go l.Run(ctx, c.refresh, log)
	return l
}
