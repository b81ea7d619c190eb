// Package ttft measures a model provider's time to first token: repeated
// streaming requests on one client over prompt lengths, answer limits and
// prompts a prefix cache can or cannot serve, each run timed from the
// request's start, and each series summarised. ragtime ttft prints what it
// measures.
package ttft

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"ragtime"
	"ragtime/pipeline"
)

const (
	// PromptUnique starts every run's prompt with a nonce: no run shares a
	// prefix with another, so a prefix cache serves none of it.
	PromptUnique = "unique"
	// PromptSame sends the identical prompt every run: the cached path.
	PromptSame = "same"
)

// Run is one measured request.
type Run struct {
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

// Series is the runs of one prompt length and answer limit.
type Series struct {
	// Prompt is "unique" (a nonce first in every run) or "same".
	Prompt       string  `json:"prompt"`
	PromptTokens int     `json:"prompt_tokens"`
	MaxTokens    int     `json:"max_tokens"`
	Runs         []Run   `json:"runs"`
	MedianMs     float64 `json:"median_ms"`
	MinMs        float64 `json:"min_ms"`
	MaxMs        float64 `json:"max_ms"`
	P95Ms        float64 `json:"p95_ms"`
	// AnswerMedianMs is set when the model reasoned first.
	AnswerMedianMs *float64 `json:"answer_median_ms,omitempty"`
	// CachedRuns counts the runs the server answered from its prefix cache:
	// at least CachedRunShare of the prompt's tokens cached (any cached
	// token when the server does not count the prompt).
	CachedRuns int `json:"cached_runs"`
	// CachedShare is the share of the series' prompt tokens served from the
	// prefix cache, over the runs whose server says; nil when none does.
	CachedShare *float64 `json:"cached_share"`
}

// CachedRunShare is the share of a run's prompt that must come from the
// prefix cache for the run to count as cached. llama.cpp's server reuses the
// chat template's first ~10 tokens even for a prompt whose nonce makes the
// rest new (2-20 % of a short prompt): that run still paid the prefill. A
// run that reused the prompt, as --same-prompt's do, gets all but the last
// few tokens from the cache.
const CachedRunShare = 0.5

// CachedRun says whether r was answered from the prefix cache.
func CachedRun(r Run) bool {
	if r.CachedTokens == nil || *r.CachedTokens == 0 {
		return false
	}
	return r.PromptTokens <= 0 || float64(*r.CachedTokens) >= CachedRunShare*float64(r.PromptTokens)
}

// NonceLine is the line a unique prompt starts with: 18 decimal digits,
// which tokenizers split into a fixed number of tokens (hex would vary).
func NonceLine(n uint64) string { return fmt.Sprintf("Run %018d.", n%1e18) }

// MeasureRun sends one streaming request and times it.
func MeasureRun(ctx context.Context, g Client, req pipeline.GenerateRequest) (Run, error) {
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
		return Run{}, err
	}
	if firstAny.IsZero() {
		return Run{}, errors.New("the stream finished without any token")
	}
	r := Run{
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

// Summarize fills the series' statistics (nearest-rank percentiles).
func Summarize(s *Series) {
	v := make([]float64, len(s.Runs))
	var answers []float64
	var cached, prompt int
	for i, r := range s.Runs {
		v[i] = r.TTFTMs
		if CachedRun(r) {
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
	s.MedianMs, s.P95Ms = ragtime.NearestRank(v, 0.5), ragtime.NearestRank(v, 0.95)
	if len(answers) > 0 {
		slices.Sort(answers)
		m := ragtime.NearestRank(answers, 0.5)
		s.AnswerMedianMs = &m
	}
}

// PadPrompt makes a prompt of about n tokens: numbered filler sentences
// before the prompt, trimmed to fit (the question stays last, as in RAG).
func PadPrompt(c pipeline.TokenCounter, prompt string, n int) string {
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

// Client is the model client measured: a streaming generator whose idle
// connections can be closed (llm.Remote).
type Client interface {
	pipeline.Generator
	CloseIdleConnections()
}

// Config is what Measure runs.
type Config struct {
	// Prompt is the question; PromptTokens, when given, pads it with
	// filler to each of these lengths (counted with Counter), one series
	// each.
	Prompt       string
	PromptTokens []int
	Counter      pipeline.TokenCounter
	// MaxTokens are the answer limits, one series each.
	MaxTokens []int
	// Runs is the number of requests per series.
	Runs int
	// Modes are PromptUnique, PromptSame or both, one series each.
	Modes []string
	// NewConnection closes the idle connections before each run, so each
	// pays a new connection.
	NewConnection bool
	// OnRun, when set, is called after each run with its series so far.
	OnRun func(s *Series, r Run)
}

// Measure runs cfg's series in order (mode, then prompt length, then
// answer limit), each of cfg.Runs requests, and summarises each. The first
// run of all, and every run with NewConnection, is marked Cold.
func Measure(ctx context.Context, c Client, cfg Config) ([]Series, error) {
	// The nonce takes the place of as many filler tokens, so a unique
	// prompt is as long as the same one.
	prompts := map[int]string{0: cfg.Prompt}
	unique := map[int]string{0: cfg.Prompt}
	lengths := []int{0}
	if len(cfg.PromptTokens) > 0 {
		nonceTokens := cfg.Counter.Count(NonceLine(0) + "\n\n")
		lengths = cfg.PromptTokens
		for _, n := range lengths {
			prompts[n] = PadPrompt(cfg.Counter, cfg.Prompt, n)
			unique[n] = PadPrompt(cfg.Counter, cfg.Prompt, n-nonceTokens)
		}
	}
	var all []Series
	first := true
	for _, mode := range cfg.Modes {
		for _, n := range lengths {
			for _, mt := range cfg.MaxTokens {
				s := Series{Prompt: mode, PromptTokens: n, MaxTokens: mt}
				for range cfg.Runs {
					prompt := prompts[n]
					if mode == PromptUnique {
						// first, before everything: no run shares a prefix
						prompt = NonceLine(rand.Uint64()) + "\n\n" + unique[n]
					}
					req := pipeline.GenerateRequest{MaxTokens: mt, Messages: []pipeline.Message{{Role: "user", Content: prompt}}}
					if cfg.NewConnection {
						c.CloseIdleConnections()
					}
					r, err := MeasureRun(ctx, c, req)
					if err != nil {
						return nil, fmt.Errorf("ttft run %d (%s prompt, %d tokens, max %d): %w", len(s.Runs)+1, mode, n, mt, err)
					}
					r.Cold = first || cfg.NewConnection
					first = false
					s.Runs = append(s.Runs, r)
					if cfg.OnRun != nil {
						cfg.OnRun(&s, r)
					}
				}
				Summarize(&s)
				all = append(all, s)
			}
		}
	}
	return all, nil
}

// ms is a duration in milliseconds.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1e3 }
