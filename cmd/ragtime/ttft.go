package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"ragtime/llm/tokens"
	"ragtime/pipeline"
)

// ttftConfig holds ttft's flags.
type ttftConfig struct {
	configFile    string
	llm           llmConfig
	runs          int
	prompt        string
	promptTokens  countsFlag
	maxTokens     countsFlag
	newConnection bool
	samePrompt    bool
	compareCache  bool
	jsonOut       bool
	encoding      string
}

// countsFlag is a comma-separated list of positive integers.
type countsFlag []int

func (l *countsFlag) String() string {
	s := make([]string, len(*l))
	for i, v := range *l {
		s[i] = strconv.Itoa(v)
	}
	return strings.Join(s, ",")
}

func (l *countsFlag) Set(v string) error {
	*l = nil
	for part := range strings.SplitSeq(v, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		n, err := strconv.Atoi(part)
		if err != nil || n < 1 {
			return fmt.Errorf("want positive whole numbers separated by commas, got %q", part)
		}
		*l = append(*l, n)
	}
	return nil
}

func (c *ttftConfig) register(fs *flag.FlagSet) {
	fs.StringVar(&c.configFile, "config", "", "JSON or TOML file with an llm section (as for serve)")
	c.llm.register(fs)
	fs.IntVar(&c.runs, "runs", 5, "streaming requests per series, on one client (1 to 1000)")
	fs.StringVar(&c.prompt, "prompt", "Explain in one paragraph why the time to first token grows with the prompt length.", "the prompt sent (with --prompt-tokens: padded to each length)")
	fs.Var(&c.promptTokens, "prompt-tokens", "comma-separated prompt lengths in tokens, one series each (e.g. 50,500,5000): TTFT rises with input length")
	c.maxTokens = countsFlag{64}
	fs.Var(&c.maxTokens, "max-tokens", "comma-separated answer limits in tokens, one series each (e.g. 200,4000): TTFT does not rise with output length")
	fs.BoolVar(&c.newConnection, "new-connection", false, "close the connection before every run, so each one pays DNS/TCP/TLS (the cold path)")
	fs.BoolVar(&c.samePrompt, "same-prompt", false, "send the identical prompt in every run, so from run 2 on a server with a prefix cache answers from it: measures the cached path (default: each run's prompt starts with a unique nonce, so no prefix is shared and every run pays the full prefill)")
	fs.BoolVar(&c.compareCache, "compare-cache", false, "measure every series twice, with unique prompts and then with the same prompt, and print both")
	fs.BoolVar(&c.jsonOut, "json", false, "print the results as JSON")
	fs.StringVar(&c.encoding, "token-encoding", "o200k_base", "tiktoken encoding used to size --prompt-tokens prompts")
}

// Prompt modes of a ttft series.
const (
	// promptUnique starts every run's prompt with a nonce: no run shares a
	// prefix with another, so a prefix cache serves none of it.
	promptUnique = "unique"
	// promptSame sends the identical prompt every run: the cached path.
	promptSame = "same"
)

// ttftRun is one measured request.
type ttftRun struct {
	TTFTMs float64 `json:"ttft_ms"`
	// AnswerMs is the first answer token's latency (after any reasoning);
	// nil when the model sent reasoning only.
	AnswerMs  *float64 `json:"answer_ms"`
	E2EMs     float64  `json:"e2e_ms"`
	ConnectMs float64  `json:"connect_ms"`
	Reused    bool     `json:"reused"`
	Cold      bool     `json:"cold"`
	Reasoning bool     `json:"reasoning"`
	Tokens    int      `json:"completion_tokens"`
	// PromptTokens is the prompt's length as the server counted it (0 when
	// it reported none).
	PromptTokens int `json:"prompt_tokens"`
	// CachedTokens are the prompt tokens the server served from its prefix
	// cache, so a user sees which path was timed; nil when the server does
	// not say (Ollama).
	CachedTokens *int `json:"cached_tokens"`
}

// ttftSeries is the runs of one prompt length and answer limit.
type ttftSeries struct {
	// Prompt is "unique" (a nonce first in every run) or "same".
	Prompt       string    `json:"prompt"`
	PromptTokens int       `json:"prompt_tokens"`
	MaxTokens    int       `json:"max_tokens"`
	Runs         []ttftRun `json:"runs"`
	MedianMs     float64   `json:"median_ms"`
	MinMs        float64   `json:"min_ms"`
	MaxMs        float64   `json:"max_ms"`
	P95Ms        float64   `json:"p95_ms"`
	// AnswerMedianMs is set when the model reasoned first.
	AnswerMedianMs *float64 `json:"answer_median_ms,omitempty"`
	// CachedRuns counts the runs the server answered from its prefix cache:
	// at least cachedRunShare of the prompt's tokens cached (any cached
	// token when the server does not count the prompt).
	CachedRuns int `json:"cached_runs"`
	// CachedShare is the share of the series' prompt tokens served from the
	// prefix cache, over the runs whose server says; nil when none does.
	CachedShare *float64 `json:"cached_share"`
}

// cachedRunShare is the share of a run's prompt that must come from the
// prefix cache for the run to count as cached. llama.cpp's server reuses the
// chat template's first ~10 tokens even for a prompt whose nonce makes the
// rest new (2-20 % of a short prompt): that run still paid the prefill. A
// run that reused the prompt, as --same-prompt's do, gets all but the last
// few tokens from the cache.
const cachedRunShare = 0.5

// cachedRun says whether r was answered from the prefix cache.
func cachedRun(r ttftRun) bool {
	if r.CachedTokens == nil || *r.CachedTokens == 0 {
		return false
	}
	return r.PromptTokens <= 0 || float64(*r.CachedTokens) >= cachedRunShare*float64(r.PromptTokens)
}

// runTTFT is the seed's TTFT measurement as a tool: N streaming requests on
// one client, their TTFTs and summary, over prompt lengths and answer
// limits.
func runTTFT(ctx context.Context, env *environment, args []string) error {
	fs := newFlagSet(env, "ttft", "ttft [flags]")
	var cfg ttftConfig
	cfg.register(fs)
	if err := parseFlags(fs, env, args); err != nil {
		return err
	}
	if cfg.runs < 1 || cfg.runs > 1000 {
		return &usageError{msg: fmt.Sprintf("--runs must be from 1 to 1000, got %d", cfg.runs)}
	}
	if strings.TrimSpace(cfg.prompt) == "" {
		return &usageError{msg: "--prompt must not be empty"}
	}
	if len(cfg.maxTokens) == 0 {
		return &usageError{msg: "--max-tokens needs at least one value"}
	}
	if cfg.samePrompt && cfg.compareCache {
		return &usageError{msg: "--same-prompt and --compare-cache exclude each other: --compare-cache already measures the same prompt after the unique ones"}
	}
	if cfg.llm.provider == "extractive" {
		return &usageError{msg: "ttft measures a model provider: set --llm-provider (openai, anthropic, ollama) and --llm-base-url, e.g. against `ragtime llmsim`"}
	}
	cfg.llm.maxRetries = 0 // a retry would hide the latency being measured
	_, remote, _, err := cfg.llm.buildGenerator(env.getenv)
	if err != nil {
		return err
	}
	defer remote.CloseIdleConnections()

	counter, err := tokens.New(cfg.encoding)
	if err != nil {
		return fmt.Errorf("--token-encoding: %w", err)
	}
	// The nonce takes the place of as many filler tokens, so a unique
	// prompt is as long as the same one.
	nonceTokens := counter.Count(nonceLine(0) + "\n\n")
	prompts := map[int]string{0: cfg.prompt}
	unique := map[int]string{0: cfg.prompt}
	lengths := []int{0}
	if len(cfg.promptTokens) > 0 {
		lengths = cfg.promptTokens
		for _, n := range lengths {
			prompts[n] = padPrompt(counter, cfg.prompt, n)
			unique[n] = padPrompt(counter, cfg.prompt, n-nonceTokens)
		}
	}
	modes := []string{promptUnique}
	switch {
	case cfg.samePrompt:
		modes = []string{promptSame}
	case cfg.compareCache:
		modes = []string{promptUnique, promptSame}
	}

	var all []ttftSeries
	first := true
	perRun := !cfg.jsonOut && len(lengths) == 1 && len(cfg.maxTokens) == 1 && len(modes) == 1
	for _, mode := range modes {
		for _, n := range lengths {
			for _, mt := range cfg.maxTokens {
				s := ttftSeries{Prompt: mode, PromptTokens: n, MaxTokens: mt}
				for range cfg.runs {
					prompt := prompts[n]
					if mode == promptUnique {
						// first, before everything: no run shares a prefix
						prompt = nonceLine(rand.Uint64()) + "\n\n" + unique[n]
					}
					req := pipeline.GenerateRequest{MaxTokens: mt, Messages: []pipeline.Message{{Role: "user", Content: prompt}}}
					if cfg.newConnection {
						remote.CloseIdleConnections()
					}
					r, err := measureRun(ctx, remote, req)
					if err != nil {
						return fmt.Errorf("ttft run %d (%s prompt, %d tokens, max %d): %w", len(s.Runs)+1, mode, n, mt, err)
					}
					r.Cold = first || cfg.newConnection
					first = false
					s.Runs = append(s.Runs, r)
					if perRun {
						printRun(env, len(s.Runs), r)
					}
				}
				summarize(&s)
				all = append(all, s)
			}
		}
	}

	if cfg.jsonOut {
		enc := json.NewEncoder(env.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(map[string]any{
			"provider": cfg.llm.provider, "model": remote.Model(), "base_url": remote.BaseURL(),
			"new_connection": cfg.newConnection, "series": all,
		})
	}
	if len(all) == 1 {
		s := all[0]
		fmt.Fprintf(env.stdout, "%s %s, %d runs, %s prompt: median %.1f ms, min %.1f, max %.1f, p95 %.1f", cfg.llm.provider, remote.Model(), len(s.Runs), s.Prompt, s.MedianMs, s.MinMs, s.MaxMs, s.P95Ms)
		if s.AnswerMedianMs != nil {
			fmt.Fprintf(env.stdout, "; first answer token median %.1f ms", *s.AnswerMedianMs)
		}
		fmt.Fprintf(env.stdout, "; %d of %d runs served from the prefix cache (%s of the prompt tokens cached)\n", s.CachedRuns, len(s.Runs), shareText(s.CachedShare))
		return nil
	}
	tw := tabwriter.NewWriter(env.stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "prompt\tprompt_tokens\tmax_tokens\truns\tmedian_ms\tp95_ms\tmin_ms\tmax_ms\tanswer_median_ms\tcached_runs\tcached_share\t")
	for _, s := range all {
		pt := "-"
		if s.PromptTokens > 0 {
			pt = strconv.Itoa(s.PromptTokens)
		}
		ans := "-"
		if s.AnswerMedianMs != nil {
			ans = fmt.Sprintf("%.1f", *s.AnswerMedianMs)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%.1f\t%.1f\t%.1f\t%.1f\t%s\t%d/%d\t%s\t\n", s.Prompt, pt, s.MaxTokens, len(s.Runs), s.MedianMs, s.P95Ms, s.MinMs, s.MaxMs, ans, s.CachedRuns, len(s.Runs), shareText(s.CachedShare))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(env.stdout, "TTFT is measured from the request start to the first token of any kind; the first run of all paid a new connection.")
	fmt.Fprintln(env.stdout, "unique: every run's prompt starts with a nonce, so no prefix cache serves it (the prefill); same: the identical prompt every run (the cached path); cached_runs: runs with at least half their prompt tokens cached; cached_share: cached / prompt tokens over the series.")
	return nil
}

// shareText shows a cached share as a percentage, "unknown" when the
// server does not say.
func shareText(share *float64) string {
	if share == nil {
		return "unknown"
	}
	return fmt.Sprintf("%.0f%%", 100**share)
}

// nonceLine is the line a unique prompt starts with: 18 decimal digits,
// which tokenizers split into a fixed number of tokens (hex would vary).
func nonceLine(n uint64) string { return fmt.Sprintf("Run %018d.", n%1e18) }

// measureRun sends one streaming request and times it.
func measureRun(ctx context.Context, g remoteGenerator, req pipeline.GenerateRequest) (ttftRun, error) {
	var firstAny, firstAnswer time.Time
	reasoning := false
	var gen pipeline.Generation
	err := g.Generate(ctx, &req, func(d pipeline.Delta) error {
		if firstAny.IsZero() {
			firstAny = d.At
		}
		if d.Reasoning {
			reasoning = true
		} else if firstAnswer.IsZero() {
			firstAnswer = d.At
		}
		return nil
	}, &gen)
	end := time.Now()
	if err != nil {
		return ttftRun{}, err
	}
	if firstAny.IsZero() {
		return ttftRun{}, errors.New("the stream finished without any token")
	}
	r := ttftRun{
		TTFTMs: ms(firstAny.Sub(gen.RequestStart)), E2EMs: ms(end.Sub(gen.RequestStart)),
		ConnectMs: ms(gen.GotConn.Sub(gen.RequestStart)), Reused: gen.Conn.Reused, Reasoning: reasoning,
		Tokens: gen.Usage.CompletionTokens, PromptTokens: gen.Usage.PromptTokens, CachedTokens: gen.Usage.CachedTokens,
	}
	if !firstAnswer.IsZero() {
		a := ms(firstAnswer.Sub(gen.RequestStart))
		r.AnswerMs = &a
	}
	return r, nil
}

func printRun(env *environment, i int, r ttftRun) {
	line := fmt.Sprintf("run %d: ttft %.1f ms", i, r.TTFTMs)
	if r.Reasoning && r.AnswerMs != nil {
		line += fmt.Sprintf(", first answer token %.1f ms", *r.AnswerMs)
	}
	conn := "reused connection"
	if !r.Reused {
		conn = fmt.Sprintf("new connection, %.1f ms to connect", r.ConnectMs)
	}
	line += " (" + conn + ")"
	if r.PromptTokens > 0 {
		line += fmt.Sprintf(", %d prompt tokens", r.PromptTokens)
	}
	if r.CachedTokens != nil {
		line += fmt.Sprintf(", %d cached", *r.CachedTokens)
	} else {
		line += ", cached unknown (the server does not say)"
	}
	if r.Cold {
		line += "  [cold]"
	}
	fmt.Fprintln(env.stdout, line)
}

// summarize fills the series' statistics (nearest-rank percentiles).
func summarize(s *ttftSeries) {
	v := make([]float64, len(s.Runs))
	var answers []float64
	var cached, prompt int
	for i, r := range s.Runs {
		v[i] = r.TTFTMs
		if cachedRun(r) {
			s.CachedRuns++
		}
		if r.CachedTokens != nil && r.PromptTokens > 0 {
			cached += *r.CachedTokens
			prompt += r.PromptTokens
		}
		if r.Reasoning && r.AnswerMs != nil {
			answers = append(answers, *r.AnswerMs)
		}
	}
	if prompt > 0 {
		share := float64(cached) / float64(prompt)
		s.CachedShare = &share
	}
	slices.Sort(v)
	s.MinMs, s.MaxMs = v[0], v[len(v)-1]
	s.MedianMs, s.P95Ms = pipeline.NearestRank(v, 0.5), pipeline.NearestRank(v, 0.95)
	if len(answers) > 0 {
		slices.Sort(answers)
		m := pipeline.NearestRank(answers, 0.5)
		s.AnswerMedianMs = &m
	}
}

// padPrompt makes a prompt of about n tokens: numbered filler sentences
// before the prompt, trimmed to fit (the question stays last, as in RAG).
func padPrompt(c pipeline.TokenCounter, prompt string, n int) string {
	base := c.Count(prompt)
	if base >= n {
		return prompt
	}
	var b strings.Builder
	for i := 0; c.Count(b.String()) < n-base; i++ {
		fmt.Fprintf(&b, "Context line %d: retrieval, prefill and decode each take their share of the time. ", i)
		if i > 100000 {
			break
		}
	}
	words := strings.Fields(b.String())
	lo, hi := 0, len(words)
	for lo < hi { // the most words that fit
		mid := (lo + hi + 1) / 2
		if c.Count(strings.Join(words[:mid], " ")+"\n\n"+prompt) <= n {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return strings.Join(words[:lo], " ") + "\n\n" + prompt
}

// ms is a duration in milliseconds.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1e3 }
