package sweep

import (
	"cmp"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"text/tabwriter"
)

// File names WriteFiles creates in its directory.
const (
	ResultsCSV = "results.csv"
	SamplesCSV = "samples.csv"
	ReportJSON = "sweep.json"
	ChartSVG   = "chart.svg"
)

// WriteTable prints the per-setting figures and the recommendation.
func (r *Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	// The retrieval column appears when the sweep varies retrieval.
	retr := func(Setting) string { return "" }
	for _, s := range r.Params.Settings {
		if s.RetrievalString() != "" {
			retr = func(s Setting) string { return cmp.Or(s.RetrievalString(), "default") + "\t" }
			fmt.Fprint(tw, "retrieval\t")
			break
		}
	}
	// The TTFT budget column appears when the sweep compares budgets.
	ttftBudget := func(Setting) string { return "" }
	if r.hasTTFTBudget() {
		ttftBudget = func(s Setting) string {
			if s.TTFTBudgetMs == 0 {
				return "-\t"
			}
			return fmt.Sprintf("%d ms\t", s.TTFTBudgetMs)
		}
		fmt.Fprint(tw, "ttft budget\t")
	}
	fmt.Fprintln(tw, "top_k\trerank\tbudget\tok\tfailed\tttft p50\tttft p95\tretrieval p50\tprefill p50\tprompt tok\tcached\tretr share\thit@k\trecall@k\tMRR\t")
	for _, s := range r.Settings {
		fmt.Fprint(tw, retr(s.Setting), ttftBudget(s.Setting))
		budget := "server"
		if s.MaxContextTokens > 0 {
			budget = strconv.Itoa(s.MaxContextTokens)
		}
		if s.OK == 0 {
			fmt.Fprintf(tw, "%d\t%d\t%s\t%d\t%d\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-\t\n", s.TopK, s.RerankTopN, budget, s.OK, s.Failed)
			continue
		}
		fmt.Fprintf(tw, "%d\t%d\t%s\t%d\t%d\t%.1f ms\t%.1f ms\t%.2f ms\t%.1f ms\t%.0f\t%s\t%.1f%%\t%s\t%s\t%s\t\n",
			s.TopK, s.RerankTopN, budget, s.OK, s.Failed, s.TTFTP50Ms, s.TTFTP95Ms, s.RetrievalP50Ms,
			s.LLMPrefillP50Ms, s.PromptTokensMean, fmtShare(s.CachedShare), 100*s.RetrievalShareP50, fmtPtr(s.HitRate), fmtPtr(s.Recall), fmtPtr(s.MRR))
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("writing the table: %w", err)
	}
	if r.hasTTFTBudget() {
		if err := r.writeBudgetComparison(w); err != nil {
			return err
		}
	}
	if r.Params.WarmCache {
		fmt.Fprintln(w, "\n--warm-cache: queries were sent without a nonce, so the server's prefix cache served what it could.")
	}
	for _, warn := range r.Warnings {
		fmt.Fprintf(w, "\nwarning: %s\n", warn)
	}
	if r.Recommendation.Setting != nil {
		rs := r.Recommendation.Setting
		budget := ""
		if rs.MaxContextTokens > 0 {
			budget = fmt.Sprintf(" max_context_tokens=%d", rs.MaxContextTokens)
		}
		if rs.Retrieval != "" {
			budget += " retrieval=" + rs.Retrieval
		}
		if rs.VectorK > 0 {
			budget += fmt.Sprintf(" vector_k=%d", rs.VectorK)
		}
		if rs.LexicalK > 0 {
			budget += fmt.Sprintf(" lexical_k=%d", rs.LexicalK)
		}
		_, err := fmt.Fprintf(w, "\nrecommended: top_k=%d rerank_top_n=%d%s: %s\n", rs.TopK, rs.RerankTopN, budget, r.Recommendation.Why)
		return err
	}
	_, err := fmt.Fprintf(w, "\nno recommendation: %s\n", r.Recommendation.Why)
	return err
}

// WriteFiles writes results.csv (one row per setting), samples.csv (one row
// per measured query), sweep.json (everything) and chart.svg into
// dir, creating it. It returns the paths written; on an error it has
// still written what it could.
func (r *Report) WriteFiles(dir string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating the output directory: %w", err)
	}
	var written []string
	var errs []error
	write := func(name string, f func(io.Writer) error) {
		path := filepath.Join(dir, name)
		if err := writeFile(path, f); err != nil {
			errs = append(errs, err)
			return
		}
		written = append(written, path)
	}
	write(ResultsCSV, r.writeResultsCSV)
	write(SamplesCSV, r.writeSamplesCSV)
	write(ReportJSON, func(w io.Writer) error {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	})
	write(ChartSVG, r.Chart)
	return written, errors.Join(errs...)
}

// writeFile writes path through a temporary file and a rename, so a reader
// never sees half a file.
func writeFile(path string, f func(io.Writer) error) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	if err := f(tmp); err != nil {
		tmp.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// hasTTFTBudget reports whether a setting asks with a TTFT budget.
func (r *Report) hasTTFTBudget() bool {
	for _, s := range r.Params.Settings {
		if s.TTFTBudgetMs > 0 {
			return true
		}
	}
	return false
}

// writeBudgetComparison writes fixed top_k against TTFT budgets on the same
// questions: TTFT p95 overall and in each half of the run (the schedule is
// shuffled, so both halves hold every setting; a load change mid-run shows
// as two different halves), recall@k, and what each budget kept.
func (r *Report) writeBudgetComparison(w io.Writer) error {
	fmt.Fprintln(w, "\nfixed top_k against a TTFT budget, on the same questions (halves: the first and second half of the run's queries):")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "setting\tok\tttft p95\t1st half p95\t2nd half p95\trecall@k\t1st half recall\t2nd half recall\tbudget held\tchunks dropped\t")
	opt := func(p *float64) string {
		if p == nil {
			return "-"
		}
		return fmt.Sprintf("%.1f ms", *p)
	}
	for _, s := range r.Settings {
		name := fmt.Sprintf("top_k %d", s.TopK)
		held, dropped := "-", "-"
		if s.TTFTBudgetMs > 0 {
			name = fmt.Sprintf("ttft_budget_ms %d (top_k ≤ %d)", s.TTFTBudgetMs, s.TopK)
			if s.OK > 0 {
				held, dropped = fmt.Sprintf("%d/%d", s.BudgetHeld, s.OK), fmt.Sprintf("%.2f", s.BudgetDroppedMean)
			}
		}
		if rs := s.RetrievalString(); rs != "" {
			name = rs + " " + name
		}
		if s.OK == 0 {
			fmt.Fprintf(tw, "%s\t0\t-\t-\t-\t-\t-\t-\t-\t-\t\n", name)
			continue
		}
		fmt.Fprintf(tw, "%s\t%d\t%.1f ms\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", name, s.OK, s.TTFTP95Ms,
			opt(s.TTFTP95FirstHalfMs), opt(s.TTFTP95SecondHalfMs), fmtPtr(s.Recall), fmtPtr(s.RecallFirstHalf), fmtPtr(s.RecallSecondHalf), held, dropped)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("writing the budget comparison: %w", err)
	}
	return nil
}

func ftoa(x float64) string { return strconv.FormatFloat(x, 'f', -1, 64) }

// fmtShare prints a cached share as a percentage, "unknown" when the server
// reported no cached tokens.
func fmtShare(p *float64) string {
	if p == nil {
		return "unknown"
	}
	return fmt.Sprintf("%.1f%%", 100**p)
}

func itoaPtr(p *int) string {
	if p == nil {
		return ""
	}
	return strconv.Itoa(*p)
}

func ptoa(p *float64) string {
	if p == nil {
		return ""
	}
	return ftoa(*p)
}

func (r *Report) writeResultsCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	_ = cw.Write([]string{"sweep_id", "top_k", "rerank_top_n", "max_context_tokens", "queries", "ok", "failed",
		"ttft_p50_ms", "ttft_p95_ms", "retrieval_p50_ms", "llm_prefill_p50_ms", "prompt_tokens_mean",
		"retrieval_share_p50", "cached_share", "cache_hits", "hit_rate", "recall", "mrr",
		"p50_retrieval_ms", "p50_llm_connect_ms", "p50_llm_prefill_ms", "p50_other_ms",
		"p95_retrieval_ms", "p95_llm_connect_ms", "p95_llm_prefill_ms", "p95_other_ms", "recommended",
		"retrieval", "vector_k", "lexical_k", "ttft_budget_ms", "ttft_p95_first_half_ms", "ttft_p95_second_half_ms",
		"budget_held", "budget_dropped_mean", "recall_first_half", "recall_second_half"})
	for _, s := range r.Settings {
		rec := r.Recommendation.Setting != nil && *r.Recommendation.Setting == s.Setting
		_ = cw.Write([]string{r.SweepID, strconv.Itoa(s.TopK), strconv.Itoa(s.RerankTopN), strconv.Itoa(s.MaxContextTokens),
			strconv.Itoa(s.Queries), strconv.Itoa(s.OK), strconv.Itoa(s.Failed),
			ftoa(s.TTFTP50Ms), ftoa(s.TTFTP95Ms), ftoa(s.RetrievalP50Ms), ftoa(s.LLMPrefillP50Ms), ftoa(s.PromptTokensMean),
			ftoa(s.RetrievalShareP50), ptoa(s.CachedShare), strconv.Itoa(s.CacheHits), ptoa(s.HitRate), ptoa(s.Recall), ptoa(s.MRR),
			ftoa(s.Stack50.Retrieval), ftoa(s.Stack50.LLMConnect), ftoa(s.Stack50.LLMPrefill), ftoa(s.Stack50.Other),
			ftoa(s.Stack95.Retrieval), ftoa(s.Stack95.LLMConnect), ftoa(s.Stack95.LLMPrefill), ftoa(s.Stack95.Other),
			strconv.FormatBool(rec), s.Retrieval, strconv.Itoa(s.VectorK), strconv.Itoa(s.LexicalK),
			strconv.Itoa(s.TTFTBudgetMs), ptoa(s.TTFTP95FirstHalfMs), ptoa(s.TTFTP95SecondHalfMs),
			strconv.Itoa(s.BudgetHeld), ftoa(s.BudgetDroppedMean), ptoa(s.RecallFirstHalf), ptoa(s.RecallSecondHalf)})
	}
	cw.Flush()
	return cw.Error()
}

func (r *Report) writeSamplesCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	_ = cw.Write([]string{"order", "query_id", "question", "run", "top_k", "rerank_top_n", "max_context_tokens", "status", "error",
		"ttft_ms", "retrieval_ms", "llm_connect_ms", "llm_prefill_ms", "other_ms", "prompt_tokens", "cached_tokens", "retrieval_share",
		"hit", "recall", "rr", "retrieval", "vector_k", "lexical_k", "ttft_budget_ms", "budget_outcome", "budget_dropped"})
	for _, s := range r.Samples {
		_ = cw.Write([]string{strconv.Itoa(s.Order), s.QueryID, strconv.Itoa(s.Question + 1), strconv.Itoa(s.Run),
			strconv.Itoa(s.TopK), strconv.Itoa(s.RerankTopN), strconv.Itoa(s.MaxContextTokens), s.Status, s.Error,
			ftoa(s.TTFTMs), ftoa(s.RetrievalMs), ftoa(s.Stages.LLMConnect), ftoa(s.LLMPrefillMs), ftoa(s.Stages.Other),
			strconv.Itoa(s.PromptTokens), itoaPtr(s.CachedTokens), ftoa(s.RetrievalShare), ptoa(s.Hit), ptoa(s.Recall), ptoa(s.RR),
			s.Retrieval, strconv.Itoa(s.VectorK), strconv.Itoa(s.LexicalK),
			strconv.Itoa(s.TTFTBudgetMs), s.BudgetOutcome, strconv.Itoa(s.BudgetDropped)})
	}
	cw.Flush()
	return cw.Error()
}
