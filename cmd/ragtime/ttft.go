package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"

	"ragtime/llm/tokens"
	"ragtime/llm/ttft"
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
	modes := []string{ttft.PromptUnique}
	switch {
	case cfg.samePrompt:
		modes = []string{ttft.PromptSame}
	case cfg.compareCache:
		modes = []string{ttft.PromptUnique, ttft.PromptSame}
	}
	m := ttft.Config{Prompt: cfg.prompt, PromptTokens: cfg.promptTokens, Counter: counter, MaxTokens: cfg.maxTokens,
		Runs: cfg.runs, Modes: modes, NewConnection: cfg.newConnection}
	if !cfg.jsonOut && len(cfg.promptTokens) <= 1 && len(cfg.maxTokens) == 1 && len(modes) == 1 {
		m.OnRun = func(s *ttft.Series, r ttft.Run) { printRun(env, len(s.Runs), r) }
	}
	all, err := ttft.Measure(ctx, remote, m)
	if err != nil {
		return err
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

// printRun prints one run as it is measured.
func printRun(env *environment, i int, r ttft.Run) {
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
