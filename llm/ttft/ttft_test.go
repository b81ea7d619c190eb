package ttft

import (
	"fmt"
	"math"
	"testing"
)

// TestCachedRunsNeedAShareOfThePrompt: llama.cpp's server reuses the chat
// template's first tokens for every prompt; a run counts as cached only when
// at least half its prompt came from the cache, and the series says which
// share of its prompt tokens did.
func TestCachedRunsNeedAShareOfThePrompt(t *testing.T) {
	t.Parallel()
	run := func(prompt int, cached *int) Run {
		return Run{TTFTMs: 10, PromptTokens: prompt, CachedTokens: cached}
	}
	n := func(v int) *int { return &v }
	for _, tc := range []struct {
		name   string
		runs   []Run
		cached int
		share  *float64
	}{
		{"the template's first tokens (llama-server, unique prompts)", []Run{run(60, n(0)), run(60, n(10)), run(60, n(10))}, 0, ptrTo(20.0 / 180)},
		{"the same prompt", []Run{run(60, n(0)), run(60, n(59)), run(60, n(59))}, 2, ptrTo(118.0 / 180)},
		{"half the prompt", []Run{run(100, n(50)), run(100, n(49))}, 1, ptrTo(0.495)},
		{"a server that does not count the prompt", []Run{run(0, n(5)), run(0, n(0))}, 1, nil},
		{"a server that does not say (Ollama)", []Run{run(60, nil), run(60, nil)}, 0, nil},
	} {
		s := Series{Runs: tc.runs}
		Summarize(&s)
		if s.CachedRuns != tc.cached {
			t.Errorf("%s: %d cached runs, want %d", tc.name, s.CachedRuns, tc.cached)
		}
		if (s.CachedShare == nil) != (tc.share == nil) || s.CachedShare != nil && math.Abs(*s.CachedShare-*tc.share) > 1e-9 {
			t.Errorf("%s: cached share %v, want %v", tc.name, show(s.CachedShare), show(tc.share))
		}
	}
}

func ptrTo[T any](v T) *T { return &v }

func show(p *float64) string {
	if p == nil {
		return "nil"
	}
	return fmt.Sprint(*p)
}
