package pipeline

import (
	"strconv"
	"time"

	"ragtime"
	"ragtime/internal/jsonappend"
)

// PrefillFit is the live prefill model of one provider and model, as the
// prefill_model view fits it from the recorded queries (docs/ttft.md):
// llm_prefill_ms ≈ (InterceptMs + MsPerToken × uncached prompt tokens) ×
// the ratio at a quantile, and llm_connect at that quantile.
type PrefillFit struct {
	Provider string `json:"provider" db:"provider"`
	Model    string `json:"model" db:"model"`
	// Samples are the queries of the window; Since and Until bound it.
	Samples   int64     `json:"samples" db:"samples"`
	Since     time.Time `json:"since" db:"since"`
	Until     time.Time `json:"until" db:"until"`
	MinTokens int       `json:"min_tokens" db:"min_tokens"`
	MaxTokens int       `json:"max_tokens" db:"max_tokens"`
	// The line through the bin medians, and the quantiles of measured /
	// fitted (the spread).
	InterceptMs float64 `json:"intercept_ms" db:"intercept_ms"`
	MsPerToken  float64 `json:"ms_per_token" db:"ms_per_token"`
	RatioP50    float64 `json:"ratio_p50" db:"ratio_p50"`
	RatioP90    float64 `json:"ratio_p90" db:"ratio_p90"`
	RatioP95    float64 `json:"ratio_p95" db:"ratio_p95"`
	// RecentRatioP50 is the median of measured / fitted over the 16
	// latest queries: a server that has just slowed down shows here
	// first.
	RecentRatioP50 float64 `json:"recent_ratio_p50" db:"recent_ratio_p50"`
	// RecentRatio is the replica's own level of measured / fitted over its
	// latest queries as they finish (prefillmodel.Live; 0: none yet): it
	// rises within two queries of a slowdown and falls slowly.
	RecentRatio float64 `json:"recent_ratio,omitempty" db:"-"`
	// RecentOverheadMs is the upper quantile of overhead_ms (what the
	// stages leave of TTFT) over the replica's latest queries, added to a
	// predicted TTFT: a loaded machine's scheduling delays show here.
	RecentOverheadMs float64 `json:"recent_overhead_ms,omitempty" db:"-"`
	// llm_connect's quantiles over the window.
	ConnectP50Ms float64 `json:"connect_p50_ms" db:"connect_p50_ms"`
	ConnectP90Ms float64 `json:"connect_p90_ms" db:"connect_p90_ms"`
	ConnectP95Ms float64 `json:"connect_p95_ms" db:"connect_p95_ms"`
	// CachedTokensP50 is the median of the prompt tokens the server served
	// from its prefix cache: a prompt's uncached tokens are estimated as
	// its tokens less this.
	CachedTokensP50 float64 `json:"cached_tokens_p50" db:"cached_tokens_p50"`
	// Where the server reports them: its queue's median, and the same
	// fit of its own prefill and of the time before it.
	ServerQueueP50Ms    *float64 `json:"server_queue_p50_ms" db:"server_queue_p50_ms"`
	ServerInterceptMs   *float64 `json:"server_intercept_ms" db:"server_intercept_ms"`
	ServerMsPerToken    *float64 `json:"server_ms_per_token" db:"server_ms_per_token"`
	PrePrefillIntercept *float64 `json:"pre_intercept_ms" db:"pre_intercept_ms"`
	PrePrefillPerToken  *float64 `json:"pre_ms_per_token" db:"pre_ms_per_token"`
}

// MinFitSamples is the fewest queries a fit must hold before a budget
// drops chunks by it.
const MinFitSamples = 16

// Budget quantiles a prediction can be made at (serve's
// --ttft-budget-quantile).
var BudgetQuantiles = []float64{0.5, 0.9, 0.95}

// PredictPrefillMs is llm_prefill_ms predicted for a prompt of tokens,
// of which the first prefix may be in the server's prefix cache (the
// system prompt and history: the retrieved context differs from ask to
// ask), at quantile q (one of BudgetQuantiles; others are taken as 0.9).
// The cached tokens are taken as the window's median, CachedTokensP50, at
// most prefix: a window of repeated prompts, served whole from the cache,
// says nothing of a new one's context.
func (f *PrefillFit) PredictPrefillMs(tokens, prefix int, q float64) float64 {
	x := max(float64(tokens)-min(f.CachedTokensP50, float64(prefix)), 0)
	line := max(f.InterceptMs+f.MsPerToken*x, 0)
	return line * f.pick(q, f.RatioP50, f.RatioP90, f.RatioP95) * f.drift()
}

// drift is how far the latest queries stand from the window's median
// (1 without a recent figure): the replica's own level (RecentRatio) if it
// has one, else the view's RecentRatioP50. A prediction follows a slowdown
// within two queries, where the line takes half a window.
func (f *PrefillFit) drift() float64 {
	recent := f.RecentRatio
	if recent <= 0 {
		recent = f.RecentRatioP50
	}
	if recent <= 0 || f.RatioP50 <= 0 {
		return 1
	}
	return recent / f.RatioP50
}

// PredictConnectMs is llm_connect predicted at quantile q.
func (f *PrefillFit) PredictConnectMs(q float64) float64 {
	return f.pick(q, f.ConnectP50Ms, f.ConnectP90Ms, f.ConnectP95Ms)
}

func (f *PrefillFit) pick(q, p50, p90, p95 float64) float64 {
	switch q {
	case 0.5:
		return p50
	case 0.95:
		return p95
	}
	return p90
}

// TTFTPredictor hands out the live prefill model (prefillmodel.Live).
//
// Contract: Fit returns the latest fit of provider and model, and false
// when there is none; it is cheap (a map lookup), never blocks on storage
// and is safe for concurrent use.
type TTFTPredictor interface {
	Fit(provider, model string) (PrefillFit, bool)
}

// Budget outcomes, as stored in queries.budget_outcome.
const (
	BudgetHeld       = "held"
	BudgetMissed     = "missed"
	BudgetUnmodelled = "unmodelled"
)

// budgetChoice is what the budget decided for a query.
type budgetChoice struct {
	budgetMs    float64 // 0: no budget
	modelled    bool
	predictedMs float64 // TTFT predicted for the prompt kept
	prefillMs   float64 // its llm_prefill part
	dropped     int
}

// chooseBudget returns how many of the assembled sources (in rank order)
// to keep: the longest prefix whose predicted TTFT — elapsed (the time
// since t0 so far) + the predicted connect + the recent overhead + the
// predicted prefill of its prompt — fits budgetMs, never fewer than minChunks (or all there are).
// full is the prompt of every source; sourceTokens are each source's
// tokens in it and sepTokens what each adds besides. Deterministic given
// fit and elapsed.
func chooseBudget(fit *PrefillFit, q float64, budgetMs float64, elapsed time.Duration, full promptParts, sourceTokens []int, sepTokens, minChunks int) (keep int, c budgetChoice) {
	c.budgetMs, c.modelled = budgetMs, true
	connect := fit.PredictConnectMs(q) + max(fit.RecentOverheadMs, 0)
	spent := float64(elapsed) / 1e6
	tokens := full.promptTokens
	keep = len(sourceTokens)
	for {
		c.prefillMs = fit.PredictPrefillMs(tokens, full.prefixTokens, q)
		c.predictedMs = spent + connect + c.prefillMs
		if c.predictedMs <= budgetMs || keep <= min(minChunks, len(sourceTokens)) {
			break
		}
		keep--
		tokens -= sourceTokens[keep] + sepTokens
	}
	c.dropped = len(sourceTokens) - keep
	return keep, c
}

// budgetFigures writes the budget's account to f (none without a budget);
// ttft is the measured TTFT (nil: no answer token).
func (c *budgetChoice) figures(f *ragtime.Figures, ttft *float64) {
	if c.budgetMs <= 0 {
		return
	}
	budget, dropped := c.budgetMs, c.dropped
	f.TTFTBudgetMs, f.BudgetDropped = &budget, &dropped
	switch {
	case !c.modelled:
		f.BudgetOutcome = BudgetUnmodelled
		return
	case ttft != nil && *ttft <= budget:
		f.BudgetOutcome = BudgetHeld
	default:
		f.BudgetOutcome = BudgetMissed
	}
	predicted, prefill := round3(c.predictedMs), round3(c.prefillMs)
	f.PredictedTTFTMs, f.PredictedPrefillMs = &predicted, &prefill
}

// appendBudget appends the budget's figures of f to a done event being
// framed (nothing without a budget): as encoding/json writes them.
func appendBudget(b []byte, f *ragtime.Figures) ([]byte, bool) {
	if f.TTFTBudgetMs == nil {
		return b, true
	}
	ok := true
	for _, x := range [...]struct {
		key string
		p   *float64
	}{{`,"ttft_budget_ms":`, f.TTFTBudgetMs}, {`,"predicted_ttft_ms":`, f.PredictedTTFTMs}, {`,"predicted_prefill_ms":`, f.PredictedPrefillMs}} {
		if x.p == nil {
			continue
		}
		b = append(b, x.key...)
		if b, ok = jsonappend.AppendFloat(b, *x.p); !ok {
			return b, false
		}
	}
	if f.BudgetDropped != nil {
		b = append(b, `,"budget_dropped":`...)
		b = strconv.AppendInt(b, int64(*f.BudgetDropped), 10)
	}
	if f.BudgetOutcome != "" {
		b = append(b, `,"budget_outcome":`...)
		b = jsonappend.AppendString(b, f.BudgetOutcome)
	}
	return b, true
}

// fitBudget applies the ask's TTFT budget to prompt, assembled from hits:
// with a prefill model for the provider and model, it keeps the longest
// prefix of the sources that fits (chooseBudget) and assembles that; it
// notes what it decided in q.ttft.
func (q *query) fitBudget(hits []Hit, prompt promptParts) promptParts {
	if q.req.TTFTBudgetMs <= 0 {
		return prompt
	}
	p := q.p
	q.ttft = budgetChoice{budgetMs: float64(q.req.TTFTBudgetMs)}
	if p.cfg.Predictor == nil {
		return prompt
	}
	fit, ok := p.cfg.Predictor.Fit(p.cfg.Provider, q.model)
	if !ok || fit.Samples < MinFitSamples {
		return prompt
	}
	tokens := make([]int, len(prompt.sources))
	var header []byte
	for i, src := range prompt.sources {
		header = appendSourceHeader(header[:0], i+1, src.Title)
		tokens[i] = p.memo.CountBytes(header) + p.memo.Count(src.Text)
	}
	quantile := p.cfg.BudgetQuantile
	if quantile == 0 {
		quantile = 0.9
	}
	keep, choice := chooseBudget(&fit, quantile, q.ttft.budgetMs, q.now().Sub(q.t0), prompt, tokens, p.sepTokens, q.req.MinChunks)
	q.ttft = choice
	if keep == len(prompt.sources) {
		return prompt
	}
	cut := q.assemble(hits[:keep]) // sources are a prefix of hits
	cut.dropped = prompt.dropped
	return cut
}

// PrefillPoint is one query of the prefill model's window: what it
// measured against what the fit reads (Stats.PrefillPoints).
type PrefillPoint struct {
	Provider       string    `json:"provider" db:"provider"`
	Model          string    `json:"model" db:"model"`
	CreatedAt      time.Time `json:"created_at" db:"created_at"`
	UncachedTokens int       `json:"uncached_tokens" db:"uncached_tokens"`
	PrefillMs      float64   `json:"prefill_ms" db:"prefill_ms"`
}

// BudgetOutcome is one row of the budget_outcomes view: an hour's asks
// with a TTFT budget, of one provider and model.
type BudgetOutcome struct {
	Hour       time.Time `json:"hour" db:"hour"`
	Provider   string    `json:"provider" db:"provider"`
	Model      string    `json:"model" db:"model"`
	Queries    int64     `json:"queries" db:"queries"`
	Held       int64     `json:"held" db:"held"`
	Missed     int64     `json:"missed" db:"missed"`
	Unmodelled int64     `json:"unmodelled" db:"unmodelled"`
	DroppedAvg *float64  `json:"dropped_avg" db:"dropped_avg"`
	TTFTP50Ms  *float64  `json:"ttft_p50_ms" db:"ttft_p50_ms"`
	TTFTP95Ms  *float64  `json:"ttft_p95_ms" db:"ttft_p95_ms"`
	// The median of |ttft_ms − predicted_ttft_ms|, and of |llm_prefill_ms
	// − predicted_prefill_ms| / llm_prefill_ms.
	TTFTAbsErrorP50Ms  *float64 `json:"ttft_abs_error_p50_ms" db:"ttft_abs_error_p50_ms"`
	PrefillRelErrorP50 *float64 `json:"prefill_rel_error_p50" db:"prefill_rel_error_p50"`
}
