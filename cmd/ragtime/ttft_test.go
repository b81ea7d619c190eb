package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"ragtime/llm/sim"
	"ragtime/llm/ttft"
)

// promptRecorder serves the simulator (with its prefix cache on, as by
// default) and keeps the prompt of every chat request it passes on.
type promptRecorder struct {
	mu      sync.Mutex
	prompts []string
}

func (p *promptRecorder) start(t *testing.T) string {
	t.Helper()
	cfg := sim.DefaultConfig()
	cfg.PrefillMs, cfg.PrefillMsPerToken, cfg.PrefillMsQuadratic, cfg.ITLMs, cfg.OutputTokens = 1, 0.001, 0, 0.5, 4
	if cfg.KVCacheBlocks == 0 {
		t.Fatal("the simulator's prefix cache is off by default; this test needs it on")
	}
	s, err := sim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/chat/completions") {
			body, _ := io.ReadAll(r.Body)
			var req struct {
				Messages []struct {
					Content string `json:"content"`
				} `json:"messages"`
			}
			if json.Unmarshal(body, &req) == nil {
				var all strings.Builder
				for _, m := range req.Messages {
					all.WriteString(m.Content)
				}
				p.mu.Lock()
				p.prompts = append(p.prompts, all.String())
				p.mu.Unlock()
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
		s.ServeHTTP(w, r)
	}))
	t.Cleanup(func() { ts.Close(); s.Close() })
	return ts.URL + "/v1"
}

func (p *promptRecorder) take() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := p.prompts
	p.prompts = nil
	return out
}

// commonPrefix is the length in bytes of the longest prefix a and b share.
func commonPrefix(a, b string) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// TestTTFTPromptsShareNoPrefix: by default every run's prompt starts with a
// nonce, so a server with a prefix cache (llmsim, on by default) serves no
// run from it; --same-prompt times the cached path on purpose, and
// --compare-cache prints both.
func TestTTFTPromptsShareNoPrefix(t *testing.T) {
	t.Parallel()
	var rec promptRecorder
	url := rec.start(t)
	args := []string{"ttft", "--llm-provider", "openai", "--llm-base-url", url, "--llm-model", "m", "--runs", "4", "--prompt-tokens", "400", "--json"}
	var res struct {
		Series []ttft.Series `json:"series"`
	}
	decode := func(out string) {
		t.Helper()
		res.Series = nil
		if err := json.Unmarshal([]byte(out), &res); err != nil {
			t.Fatalf("--json output: %v\n%s", err, out)
		}
	}

	out, _, err := runOut(t, nil, args...)
	if err != nil {
		t.Fatal(err)
	}
	decode(out)
	if len(res.Series) != 1 || res.Series[0].Prompt != ttft.PromptUnique || len(res.Series[0].Runs) != 4 {
		t.Fatalf("want one series of 4 unique-prompt runs: %+v", res.Series)
	}
	for i, r := range res.Series[0].Runs {
		if r.CachedTokens == nil || *r.CachedTokens != 0 || r.PromptTokens < 400 {
			t.Errorf("unique run %d: %s of %d prompt tokens cached, want 0 of about 400 (+ the chat template)", i+1, show(r.CachedTokens), r.PromptTokens)
		}
	}
	prompts := rec.take()
	if len(prompts) != 4 {
		t.Fatalf("the server saw %d prompts, want 4", len(prompts))
	}
	for i := range prompts {
		for j := range i {
			// they may share "Run " and a hex digit or two by chance, never
			// the whole nonce (and so never a 16-token cache block)
			if n := commonPrefix(prompts[i], prompts[j]); n >= len(ttft.NonceLine(0)) {
				t.Errorf("prompts of runs %d and %d share their first %d bytes (%q): a prefix cache could serve them", j+1, i+1, n, prompts[i][:n])
			}
		}
	}

	out, _, err = runOut(t, nil, append(args, "--same-prompt")...)
	if err != nil {
		t.Fatal(err)
	}
	decode(out)
	s := res.Series[0]
	if s.Prompt != ttft.PromptSame || s.CachedRuns != 3 || s.Runs[0].CachedTokens == nil || *s.Runs[0].CachedTokens != 0 {
		t.Errorf("--same-prompt: prompt %q, %d cached runs, first run %s cached; want same, 3 (runs 2-4), 0", s.Prompt, s.CachedRuns, show(s.Runs[0].CachedTokens))
	}
	for i, r := range s.Runs[1:] {
		if r.CachedTokens == nil || *r.CachedTokens < 16 {
			t.Errorf("--same-prompt run %d: %s cached tokens, want the prompt's full blocks", i+2, show(r.CachedTokens))
		}
	}
	prompts = rec.take()
	for i, p := range prompts {
		if p != prompts[0] {
			t.Errorf("--same-prompt run %d sent another prompt", i+1)
		}
	}

	out, _, err = runOut(t, nil, "ttft", "--llm-provider", "openai", "--llm-base-url", url, "--llm-model", "m", "--runs", "2", "--compare-cache")
	if err != nil {
		t.Fatal(err)
	}
	// The last two columns: cached_runs and cached_share.
	var unique, same bool
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) > 2 && f[0] == ttft.PromptUnique {
			unique = f[len(f)-2] == "0/2" && f[len(f)-1] == "0%"
		}
		if len(f) > 2 && f[0] == ttft.PromptSame {
			same = f[len(f)-2] == "1/2" && f[len(f)-1] != "0%" && strings.HasSuffix(f[len(f)-1], "%")
		}
	}
	if !unique || !same {
		t.Errorf("--compare-cache: want a unique row with 0/2 cached runs, 0%% cached, and a same row with 1/2 and a cached share:\n%s", out)
	}

	if _, _, err := runOut(t, nil, append(args, "--same-prompt", "--compare-cache")...); err == nil || !strings.Contains(err.Error(), "--compare-cache") {
		t.Errorf("--same-prompt with --compare-cache: %v, want a usage error naming both", err)
	}
}
