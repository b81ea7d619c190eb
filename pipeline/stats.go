package pipeline

import (
	"time"

	"ragtime"
)

// Stats is what the dashboard views say about the queries of one window.
// Times are milliseconds, shares and rates fractions (0..1); a nil number
// means there was nothing to compute it from. It is the one read type
// declared here rather than in package ragtime: it carries the prefill
// model's fits (PrefillFit), which predict.
type Stats struct {
	Since time.Time `json:"since"`
	Until time.Time `json:"until"`
	// Bucket is the width of a Series point.
	Bucket string `json:"bucket"`
	// Provider and Model are the filter the figures are for; empty: every
	// provider's, every model's.
	Provider string `json:"provider,omitempty"`
	Model    string `json:"model,omitempty"`
	// Models are the providers and models of the window's queries, the
	// choices of a filter, whatever Provider and Model are.
	Models []ragtime.ProviderModel `json:"models"`
	// Totals are over the whole window.
	Totals ragtime.Totals `json:"totals"`
	// Series are the window's queries in Bucket-wide points, oldest first.
	Series []ragtime.SeriesPoint `json:"series"`
	// StagePercentiles is stage_percentiles(since).
	StagePercentiles []ragtime.StagePercentile `json:"stage_percentiles"`
	// TTFTTail is the ttft_tail view for the hours the window touches.
	TTFTTail []ragtime.TTFTTail `json:"ttft_tail"`
	// TopK is topk_tradeoff(since).
	TopK []ragtime.TopKTradeoff `json:"topk_tradeoff"`
	// CacheHitRate is the cache_hit_rate view for the hours the window touches.
	CacheHitRate []ragtime.CacheHitRate `json:"cache_hit_rate"`
	// NetworkHealth is the network_health view for the hours the window touches.
	NetworkHealth []ragtime.NetworkHealth `json:"network_health"`
	// SlowQueries are the window's slowest queries (slow_queries), slowest first.
	SlowQueries []ragtime.SlowQuery `json:"slow_queries"`
	// PrefillModel is the prefill_model view: the live prefill model of
	// each provider and model (its own sliding window, whatever Since).
	PrefillModel []PrefillFit `json:"prefill_model"`
	// PrefillPoints are the queries of the prefill model's window (the
	// last 256 ok queries of the past hour per provider and model, whatever
	// Since): each one's llm_prefill_ms against its uncached prompt tokens,
	// the points the dashboard draws under the fitted line.
	PrefillPoints []PrefillPoint `json:"prefill_points"`
	// BudgetOutcomes is the budget_outcomes view for the hours the window touches.
	BudgetOutcomes []BudgetOutcome `json:"budget_outcomes"`
}
