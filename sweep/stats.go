package sweep

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"

	"ragtime/eval"
)

// Setting is one point of the sweep.
type Setting struct {
	TopK int `json:"top_k"`
	// RerankTopN is how many reranked chunks go to the context (0: reranking off).
	RerankTopN int `json:"rerank_top_n"`
	// MaxContextTokens is the context budget; 0 means the server's own.
	MaxContextTokens int `json:"max_context_tokens,omitempty"`
	// Retrieval is the retrieval mode (hybrid, vector or lexical; empty:
	// the server's default), VectorK and LexicalK the leg depths (0: the
	// default).
	Retrieval string `json:"retrieval,omitempty"`
	VectorK   int    `json:"vector_k,omitempty"`
	LexicalK  int    `json:"lexical_k,omitempty"`
	// TTFTBudgetMs, when > 0, is the ttft_budget_ms each query is asked
	// with: TopK is then the most the context may hold, and the budget
	// keeps the longest prefix of the ranked chunks predicted to fit. 0
	// asks with no budget (whatever the server's default), a fixed top_k.
	TTFTBudgetMs int `json:"ttft_budget_ms,omitempty"`
}

func (s Setting) String() string {
	out := fmt.Sprintf("k=%d rerank=%d", s.TopK, s.RerankTopN)
	if s.MaxContextTokens > 0 {
		out += fmt.Sprintf(" budget=%d", s.MaxContextTokens)
	}
	if s.TTFTBudgetMs > 0 {
		out += fmt.Sprintf(" ttft_budget=%dms", s.TTFTBudgetMs)
	}
	if r := s.RetrievalString(); r != "" {
		out = r + " " + out
	}
	return out
}

// RetrievalString names the retrieval dimensions that are set: the mode and
// the leg depths ("hybrid vk=50 lk=20"); empty when none is.
func (s Setting) RetrievalString() string {
	var parts []string
	if s.Retrieval != "" {
		parts = append(parts, s.Retrieval)
	}
	if s.VectorK > 0 {
		parts = append(parts, fmt.Sprintf("vk=%d", s.VectorK))
	}
	if s.LexicalK > 0 {
		parts = append(parts, fmt.Sprintf("lk=%d", s.LexicalK))
	}
	return strings.Join(parts, " ")
}

// Breakdown splits a TTFT into its stages, in milliseconds; the parts add
// up to the TTFT (docs/design.md's identity ttft = queue + retrieval + gen_ttft +
// overhead, with gen_ttft = llm_connect + llm_prefill).
type Breakdown struct {
	Retrieval  float64 `json:"retrieval_ms"`
	LLMConnect float64 `json:"llm_connect_ms"`
	LLMPrefill float64 `json:"llm_prefill_ms"`
	// Other is queue + overhead (the service's own glue).
	Other float64 `json:"other_ms"`
}

// Total is the sum of the parts.
func (b Breakdown) Total() float64 { return b.Retrieval + b.LLMConnect + b.LLMPrefill + b.Other }

// Sample is one measured query.
type Sample struct {
	Setting
	// Question is the question's index in the file's order; Run counts from 1;
	// Order is the query's place in the shuffled schedule (from 1).
	Question int    `json:"question"`
	Run      int    `json:"run"`
	Order    int    `json:"order"`
	QueryID  string `json:"query_id"`
	Status   string `json:"status"`
	Error    string `json:"error,omitempty"`

	TTFTMs         float64 `json:"ttft_ms"`
	RetrievalMs    float64 `json:"retrieval_ms"`
	LLMPrefillMs   float64 `json:"llm_prefill_ms"`
	RetrievalShare float64 `json:"retrieval_share"`
	PromptTokens   int     `json:"prompt_tokens"`
	// CachedTokens are the prompt tokens the server served from its prefix
	// cache; nil when it does not say (Ollama).
	CachedTokens *int      `json:"cached_tokens"`
	Stages       Breakdown `json:"stages"`
	// Docs are the distinct documents of the context's chunks, in rank order.
	Docs []string `json:"docs"`
	// BudgetOutcome (held, missed, unmodelled) and BudgetDropped (the
	// ranked chunks left out for it) are set when the query had a TTFT
	// budget.
	BudgetOutcome string `json:"budget_outcome,omitempty"`
	BudgetDropped int    `json:"budget_dropped,omitempty"`
	// Hit, Recall and RR (reciprocal rank) are set when the question has
	// relevance labels.
	Hit    *float64 `json:"hit,omitempty"`
	Recall *float64 `json:"recall,omitempty"`
	RR     *float64 `json:"rr,omitempty"`
}

// score sets Hit, Recall and RR from Docs against the relevant ids: hit is 1
// when any relevant document is in the context, recall the fraction of the
// relevant documents that are, RR one over the rank of the first (0 when
// none is). Ranks count documents, not chunks: a document's later chunks
// add nothing.
func (s *Sample) score(relevant []string) {
	if len(relevant) == 0 {
		return
	}
	want := map[string]bool{}
	for _, id := range relevant {
		want[id] = true
	}
	var found int
	rr := 0.0
	for i, d := range s.Docs {
		if want[d] {
			found++
			if rr == 0 {
				rr = 1 / float64(i+1)
			}
		}
	}
	hit := 0.0
	if found > 0 {
		hit = 1
	}
	recall := float64(found) / float64(len(want))
	s.Hit, s.Recall, s.RR = &hit, &recall, &rr
}

// distinctDocs returns the doc ids in order, each once.
func distinctDocs(ids []string) []string {
	out := make([]string, 0, len(ids))
	seen := map[string]bool{}
	for _, id := range ids {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}

// Result is the summary of one setting.
type Result struct {
	Setting
	Queries int `json:"queries"`
	OK      int `json:"ok"`
	Failed  int `json:"failed"`

	TTFTP50Ms         float64 `json:"ttft_p50_ms"`
	TTFTP95Ms         float64 `json:"ttft_p95_ms"`
	RetrievalP50Ms    float64 `json:"retrieval_p50_ms"`
	LLMPrefillP50Ms   float64 `json:"llm_prefill_p50_ms"`
	PromptTokensMean  float64 `json:"prompt_tokens_mean"`
	RetrievalShareP50 float64 `json:"retrieval_share_p50"`
	// CachedShare is the share of the prompt tokens the server served from
	// its prefix cache, over the queries whose server said (nil when none
	// did: Ollama reports no cached tokens, so unknown, not 0).
	CachedShare *float64 `json:"cached_share"`
	// CacheHits counts the queries with more than half of their prompt
	// cached; CacheKnown those whose server reported cached tokens.
	CacheHits  int `json:"cache_hits"`
	CacheKnown int `json:"cache_known"`
	// Stack50 and Stack95 split TTFT p50 and p95 by stage: the mean stage
	// shares of the queries nearest each percentile, times the percentile.
	Stack50 Breakdown `json:"stack_p50"`
	Stack95 Breakdown `json:"stack_p95"`

	// HitRate (hit@k), Recall (recall@k) and MRR average the labelled
	// questions' queries; nil without relevance labels.
	HitRate *float64 `json:"hit_rate"`
	Recall  *float64 `json:"recall"`
	MRR     *float64 `json:"mrr"`
	// Labelled counts the queries the relevance figures average.
	Labelled int `json:"labelled"`

	// TTFTP95FirstHalfMs and TTFTP95SecondHalfMs split TTFT p95 by the
	// query's place in the shuffled schedule (the first half of the sweep's
	// queries, the second): a server whose load changed mid-run shows as
	// two different halves. Nil when a half has no ok query.
	TTFTP95FirstHalfMs  *float64 `json:"ttft_p95_first_half_ms,omitempty"`
	TTFTP95SecondHalfMs *float64 `json:"ttft_p95_second_half_ms,omitempty"`
	// RecallFirstHalf and RecallSecondHalf are recall@k over each half's
	// labelled queries; nil when a half has none.
	RecallFirstHalf  *float64 `json:"recall_first_half,omitempty"`
	RecallSecondHalf *float64 `json:"recall_second_half,omitempty"`
	// With a TTFT budget: the ok queries whose TTFT stayed within it, and
	// the mean of the ranked chunks dropped for it.
	BudgetHeld        int     `json:"budget_held,omitempty"`
	BudgetDroppedMean float64 `json:"budget_dropped_mean,omitempty"`
}

// Percentile is the p-quantile (0..1) of sorted xs, as eval.Percentile
// defines it (PostgreSQL's percentile_cont), so the sweep's figures equal
// the sweep_results view's. NaN when xs is empty.
func Percentile(sorted []float64, p float64) float64 { return eval.Percentile(sorted, p) }

// Summarize computes one Result per setting, in the settings' order, from
// the samples measured so far. Only queries with status ok count towards
// the timing and relevance figures.
func Summarize(settings []Setting, samples []Sample) []Result {
	out := make([]Result, 0, len(settings))
	last := 0 // the last order measured: the halves split at its middle
	for _, s := range samples {
		last = max(last, s.Order)
	}
	for _, st := range settings {
		r := Result{Setting: st}
		var ok []Sample
		for _, s := range samples {
			if s.Setting != st {
				continue
			}
			r.Queries++
			if s.Status == "ok" {
				ok = append(ok, s)
			} else {
				r.Failed++
			}
		}
		r.OK = len(ok)
		if len(ok) > 0 {
			summarizeOK(&r, ok)
			summarizeHalves(&r, ok, last)
		}
		out = append(out, r)
	}
	return out
}

func summarizeOK(r *Result, ok []Sample) {
	col := func(f func(Sample) float64) []float64 {
		xs := make([]float64, len(ok))
		for i, s := range ok {
			xs[i] = f(s)
		}
		slices.Sort(xs)
		return xs
	}
	ttft := col(func(s Sample) float64 { return s.TTFTMs })
	r.TTFTP50Ms = round3(Percentile(ttft, 0.5))
	r.TTFTP95Ms = round3(Percentile(ttft, 0.95))
	r.RetrievalP50Ms = round3(Percentile(col(func(s Sample) float64 { return s.RetrievalMs }), 0.5))
	r.LLMPrefillP50Ms = round3(Percentile(col(func(s Sample) float64 { return s.LLMPrefillMs }), 0.5))
	r.RetrievalShareP50 = math.Round(Percentile(col(func(s Sample) float64 { return s.RetrievalShare }), 0.5)*1e4) / 1e4
	var tokens float64
	for _, s := range ok {
		tokens += float64(s.PromptTokens)
	}
	r.PromptTokensMean = math.Round(tokens/float64(len(ok))*10) / 10
	var cached, prompt float64
	for _, s := range ok {
		if s.CachedTokens == nil {
			continue
		}
		r.CacheKnown++
		cached += float64(*s.CachedTokens)
		prompt += float64(s.PromptTokens)
		if 2**s.CachedTokens > s.PromptTokens {
			r.CacheHits++
		}
	}
	if r.CacheKnown > 0 {
		share := 0.0
		if prompt > 0 {
			share = round4(cached / prompt)
		}
		r.CachedShare = &share
	}
	r.Stack50 = stackAt(ok, 0.5, r.TTFTP50Ms)
	r.Stack95 = stackAt(ok, 0.95, r.TTFTP95Ms)

	var hit, recall, rr float64
	for _, s := range ok {
		if s.Hit == nil {
			continue
		}
		r.Labelled++
		hit += *s.Hit
		recall += *s.Recall
		rr += *s.RR
	}
	if r.Labelled > 0 {
		n := float64(r.Labelled)
		h, rc, m := round4(hit/n), round4(recall/n), round4(rr/n)
		r.HitRate, r.Recall, r.MRR = &h, &rc, &m
	}
}

// summarizeHalves sets the p95 of each half of the schedule (orders up to
// last/2, and after) and the budget's figures.
func summarizeHalves(r *Result, ok []Sample, last int) {
	var first, second []float64
	var dropped float64
	var recall, labelled [2]float64
	for _, s := range ok {
		h := 0
		if 2*s.Order <= last {
			first = append(first, s.TTFTMs)
		} else {
			second = append(second, s.TTFTMs)
			h = 1
		}
		if s.Recall != nil {
			recall[h] += *s.Recall
			labelled[h]++
		}
		if s.BudgetOutcome == "held" {
			r.BudgetHeld++
		}
		dropped += float64(s.BudgetDropped)
	}
	for _, h := range []struct {
		xs  []float64
		dst **float64
	}{{first, &r.TTFTP95FirstHalfMs}, {second, &r.TTFTP95SecondHalfMs}} {
		if len(h.xs) > 0 {
			slices.Sort(h.xs)
			v := round3(Percentile(h.xs, 0.95))
			*h.dst = &v
		}
	}
	for h, dst := range []**float64{&r.RecallFirstHalf, &r.RecallSecondHalf} {
		if labelled[h] > 0 {
			v := round4(recall[h] / labelled[h])
			*dst = &v
		}
	}
	if r.TTFTBudgetMs > 0 {
		r.BudgetDroppedMean = math.Round(dropped/float64(len(ok))*100) / 100
	}
}

// stackAt splits the TTFT percentile p (value v) by stage: it averages the
// stage shares of the queries ranked within ±5 % (at least ±1 query) of the
// percentile's rank, and scales them to v, so the stack is as tall as the
// percentile and split the way the queries around it were.
func stackAt(ok []Sample, p, v float64) Breakdown {
	sorted := slices.Clone(ok)
	slices.SortFunc(sorted, func(a, b Sample) int { return cmp.Compare(a.TTFTMs, b.TTFTMs) })
	n := len(sorted)
	center := int(math.Round(p * float64(n-1)))
	w := max(1, int(math.Round(0.05*float64(n))))
	var share Breakdown
	var count float64
	for i := max(0, center-w); i <= min(n-1, center+w); i++ {
		s := sorted[i]
		t := s.Stages.Total()
		if t <= 0 {
			continue
		}
		share.Retrieval += s.Stages.Retrieval / t
		share.LLMConnect += s.Stages.LLMConnect / t
		share.LLMPrefill += s.Stages.LLMPrefill / t
		share.Other += s.Stages.Other / t
		count++
	}
	if count == 0 {
		return Breakdown{Other: v}
	}
	return Breakdown{
		Retrieval:  round3(share.Retrieval / count * v),
		LLMConnect: round3(share.LLMConnect / count * v),
		LLMPrefill: round3(share.LLMPrefill / count * v),
		Other:      round3(share.Other / count * v),
	}
}

// MostlyCached reports whether most of the setting's queries had more than
// half of their prompt served from the server's prefix cache: its TTFT then
// times cache hits, not prefill.
func (r Result) MostlyCached() bool { return r.CacheKnown > 0 && 2*r.CacheHits > r.CacheKnown }

// cacheWarnings says which settings' figures rest on prefix-cache hits.
func cacheWarnings(results []Result, warm bool) []string {
	var out []string
	for _, r := range results {
		if !r.MostlyCached() {
			continue
		}
		why := "a per-query nonce follows the system prompt, so only the system prompt can be cached: it is over half of these prompts"
		if warm {
			why = "--warm-cache: repeated runs and queries sharing a context prefix"
		}
		out = append(out, fmt.Sprintf("%s: %d of %d queries had over half of their prompt served from the server's prefix cache (%.0f %% of all prompt tokens; %s): its TTFT and prefill figures time cache hits, not prefill",
			r.Setting, r.CacheHits, r.CacheKnown, 100*derefOr(r.CachedShare, 0), why))
	}
	return out
}

func derefOr(p *float64, v float64) float64 {
	if p == nil {
		return v
	}
	return *p
}

func round3(x float64) float64 { return math.Round(x*1e3) / 1e3 }
func round4(x float64) float64 { return math.Round(x*1e4) / 1e4 }

// MinTailSamples is how many samples must lie beyond a percentile for it
// to be read as one: with fewer, a p95 is the slowest query or two and
// moves with each of them. A p95 needs 40 samples, a p99 200.
const MinTailSamples = 2

// MinSamples is the fewest samples percentile p (0..1) can rest on.
func MinSamples(p float64) int { return int(math.Ceil(MinTailSamples/(1-p) - 1e-9)) }

// p95Runs is the --runs that gives every measured setting the samples a
// p95 needs, given that runs gave the fewest ok queries of any of them
// fewest; 0 when runs is unknown.
func p95Runs(runs, fewest int) int {
	if runs <= 0 || fewest <= 0 {
		return 0
	}
	return (MinSamples(0.95)*runs + fewest - 1) / fewest
}

// fewestOK is the measured setting with the fewest ok queries, if its p95
// rests on too few of them.
func fewestOK(results []Result) (*Result, bool) {
	var few *Result
	for i := range results {
		r := &results[i]
		if r.OK > 0 && (few == nil || r.OK < few.OK) {
			few = r
		}
	}
	return few, few != nil && few.OK < MinSamples(0.95)
}

// moreRuns is the advice for p95s that rest on too few samples.
func moreRuns(few *Result, runs int) string {
	advice := "rerun with more --runs"
	if n := p95Runs(runs, few.OK); n > 0 {
		advice = fmt.Sprintf("rerun with --runs %d or more", n)
	}
	return fmt.Sprintf("the TTFT p95s rest on as few as %d ok queries (%s); a p95 needs %d, %d beyond it, or it is the slowest query or two: %s",
		few.OK, few.Setting, MinSamples(0.95), MinTailSamples, advice)
}

// sampleWarnings says when the p95s rest on too few samples to be read.
func sampleWarnings(results []Result, runs int) []string {
	if few, ok := fewestOK(results); ok {
		return []string{moreRuns(few, runs)}
	}
	return nil
}

// Recommendation is the setting the sweep recommends, and why.
type Recommendation struct {
	// Setting is nil when no setting meets the rule.
	Setting *Setting `json:"setting"`
	// Why is one sentence.
	Why string `json:"why"`
	// BestRecall is the best recall of any setting; nil without labels.
	BestRecall *float64 `json:"best_recall"`
}

// Recommend applies the rule: among the settings with measured queries,
// the smallest k whose recall is within tolerance of the best recall and,
// when budgetMs > 0, whose TTFT p95 is under budgetMs; ties on k go to the
// lower TTFT p95. Without relevance labels every setting passes the recall
// test, and the sentence says so. When no setting meets the budget and the
// p95s rest on too few samples (MinSamples), the sentence asks for more
// runs (runs is the sweep's --runs; 0 when unknown) rather than blaming a
// stage.
func Recommend(results []Result, tolerance, budgetMs float64, runs int) Recommendation {
	var measured []Result
	for _, r := range results {
		// A TTFT budget is compared with the fixed settings, not picked as
		// one: serve's --top-k cannot apply it.
		if r.OK > 0 && r.TTFTBudgetMs == 0 {
			measured = append(measured, r)
		}
	}
	if len(measured) == 0 {
		return Recommendation{Why: "no setting has a successful query, so there is nothing to recommend."}
	}
	var best *Result
	for i := range measured {
		r := &measured[i]
		if r.Recall != nil && (best == nil || *r.Recall > *best.Recall) {
			best = r
		}
	}
	var rec Recommendation
	if best != nil {
		b := *best.Recall
		rec.BestRecall = &b
	}
	var pick *Result
	var fastest *Result
	for i := range measured {
		r := &measured[i]
		if fastest == nil || r.TTFTP95Ms < fastest.TTFTP95Ms {
			fastest = r
		}
		if best != nil && (r.Recall == nil || *r.Recall < *best.Recall-tolerance-1e-9) {
			continue
		}
		if budgetMs > 0 && r.TTFTP95Ms >= budgetMs {
			continue
		}
		if pick == nil || r.TopK < pick.TopK || (r.TopK == pick.TopK && r.TTFTP95Ms < pick.TTFTP95Ms) {
			pick = r
		}
	}
	if pick == nil {
		if few, ok := fewestOK(measured); ok {
			rec.Why = fmt.Sprintf("no setting has TTFT p95 under %.0f ms, but %s.", budgetMs, moreRuns(few, runs))
			return rec
		}
		if best != nil {
			rec.Why = fmt.Sprintf("no setting has recall within %.2f of the best (%.3f at %s) and TTFT p95 under %.0f ms; the fastest, %s, has p95 %.1f ms and recall %s, so raise --ttft-budget-ms or make prefill cheaper.",
				tolerance, *best.Recall, best.Setting, budgetMs, fastest.Setting, fastest.TTFTP95Ms, fmtPtr(fastest.Recall))
		} else {
			rec.Why = fmt.Sprintf("no setting has TTFT p95 under %.0f ms; the fastest, %s, has p95 %.1f ms, so raise --ttft-budget-ms or make prefill cheaper.",
				budgetMs, fastest.Setting, fastest.TTFTP95Ms)
		}
		return rec
	}
	s := pick.Setting
	rec.Setting = &s
	budget := ""
	if budgetMs > 0 {
		budget = fmt.Sprintf(" under the %.0f ms budget", budgetMs)
	}
	if best == nil {
		rec.Why = fmt.Sprintf("%s is the smallest k with TTFT p95 %.1f ms%s; the questions carry no relevance labels, so recall was not weighed: add \"relevant\" doc ids to let recall count.",
			s, pick.TTFTP95Ms, budget)
		return rec
	}
	var smaller *Result // the largest k below the pick, to say what it would cost
	for i := range measured {
		r := &measured[i]
		if r.TopK < pick.TopK && r.Recall != nil && (smaller == nil || r.TopK > smaller.TopK) {
			smaller = r
		}
	}
	var why string
	if *pick.Recall >= *best.Recall {
		why = fmt.Sprintf("%s is the smallest k that reaches the best recall (%.3f), with TTFT p95 %.1f ms%s", s, *pick.Recall, pick.TTFTP95Ms, budget)
	} else {
		why = fmt.Sprintf("%s is the smallest k whose recall (%.3f) is within %.2f of the best (%.3f at %s), with TTFT p95 %.1f ms%s, %.1f ms below that setting's",
			s, *pick.Recall, tolerance, *best.Recall, best.Setting, pick.TTFTP95Ms, budget, best.TTFTP95Ms-pick.TTFTP95Ms)
	}
	if smaller != nil {
		// A smaller k measured no faster (noise at sub-millisecond TTFT)
		// saves nothing: "save -0.0 ms" would read as nonsense.
		if saved := pick.TTFTP95Ms - smaller.TTFTP95Ms; saved >= 0.05 {
			why += fmt.Sprintf("; k=%d would save %.1f ms at p95 but lose %.3f recall", smaller.TopK, saved, *pick.Recall-*smaller.Recall)
		} else {
			why += fmt.Sprintf("; k=%d measured no faster at p95 and loses %.3f recall", smaller.TopK, *pick.Recall-*smaller.Recall)
		}
	}
	rec.Why = why + "."
	return rec
}

func fmtPtr(p *float64) string {
	if p == nil {
		return "n/a"
	}
	return fmt.Sprintf("%.3f", *p)
}
