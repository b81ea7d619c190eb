package sim

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"ragtime/internal/openaiwire"
)

// streamAll posts a streamed request and returns its raw data lines, the
// time to the first non-empty content or reasoning delta, and the read error.
func streamAll(t *testing.T, url string, header map[string]string, body any) (lines []string, ttft time.Duration, status int, readErr error) {
	t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/chat/completions", strings.NewReader(string(b)))
	for k, v := range header {
		req.Header.Set(k, v)
	}
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		io.Copy(io.Discard, resp.Body)
		return nil, 0, resp.StatusCode, nil
	}
	br := bufio.NewReader(resp.Body)
	for {
		line, err := br.ReadString('\n')
		if data, ok := strings.CutPrefix(strings.TrimSpace(line), "data: "); ok {
			if ttft == 0 && (strings.Contains(data, `"content":"`) && !strings.Contains(data, `"content":""`) || strings.Contains(data, `"reasoning`)) {
				ttft = time.Since(start)
			}
			lines = append(lines, data)
		}
		if err != nil {
			if err == io.EOF {
				err = nil
			}
			return lines, ttft, 200, err
		}
	}
}

func usageOf(t *testing.T, lines []string) map[string]any {
	t.Helper()
	for _, l := range lines {
		var c map[string]any
		if json.Unmarshal([]byte(l), &c) == nil && c["usage"] != nil {
			return c
		}
	}
	t.Fatalf("no usage chunk in %v", lines)
	return nil
}

func TestPrefixCacheCutsTTFT(t *testing.T) {
	t.Parallel()
	const prefillMs, perTokenMs = 5, 0.1
	_, ts := startSim(t, Config{PrefillMs: prefillMs, PrefillMsPerToken: perTokenMs, OutputTokens: 2, KVCacheBlocks: 1000})
	system := strings.Repeat("Answer only from the context below and cite sources by number. ", 180) // ~2k tokens
	// ask returns the client's TTFT, the usage, and the prefill the
	// simulator modelled (llama.cpp-style timings.prompt_ms).
	ask := func(q string) (time.Duration, float64, float64, float64) {
		body := map[string]any{"model": "m", "stream": true, "stream_options": map[string]any{"include_usage": true},
			"messages": []map[string]string{{"role": "system", "content": system}, {"role": "user", "content": q}}}
		lines, ttft, status, err := streamAll(t, ts.URL, map[string]string{"X-Llmsim-Timings": "1"}, body)
		if status != 200 || err != nil {
			t.Fatalf("status %d, err %v", status, err)
		}
		u := usageOf(t, lines)["usage"].(map[string]any)
		modelled := -1.0
		for _, l := range lines {
			var c struct {
				Timings *struct {
					PromptMS float64 `json:"prompt_ms"`
				} `json:"timings"`
			}
			if json.Unmarshal([]byte(l), &c) == nil && c.Timings != nil {
				modelled = c.Timings.PromptMS
			}
		}
		return ttft, u["prompt_tokens"].(float64), u["prompt_tokens_details"].(map[string]any)["cached_tokens"].(float64), modelled
	}
	cold, prompt, cached0, coldModel := ask("what is prefill?")
	warm, warmPrompt, cached1, warmModel := ask("what is decode?")
	t.Logf("prompt %v tokens: cold TTFT %v (cached %v, modelled %v ms), warm TTFT %v (cached %v, modelled %v ms)",
		prompt, cold, cached0, coldModel, warm, cached1, warmModel)
	if cached0 != 0 {
		t.Errorf("first request reports %v cached tokens, want 0", cached0)
	}
	if cached1 < prompt-40 || int(cached1)%blockTokens != 0 {
		t.Errorf("second request reports %v cached tokens of %v, want the shared prefix in whole 16-token blocks", cached1, prompt)
	}
	// The cache cuts the modelled prefill by the cached tokens' cost; the
	// wall clock only bounds it from below (a loaded machine delays the
	// warm answer too: "warm well under cold" was no bound).
	const tol = 0.01 // ms: the timings are rounded to µs
	for _, c := range []struct {
		name          string
		model, uncach float64
		ttft          time.Duration
	}{{"cold", coldModel, prompt - cached0, cold}, {"warm", warmModel, warmPrompt - cached1, warm}} {
		want := prefillMs + perTokenMs*c.uncach
		if math.Abs(c.model-want) > tol {
			t.Errorf("%s: modelled prefill %v ms, want %v + %v × %v uncached tokens = %.3f", c.name, c.model, prefillMs, perTokenMs, c.uncach, want)
		}
		if c.ttft < time.Duration(want*float64(time.Millisecond)) {
			t.Errorf("%s: first token after %v, before the modelled prefill of %.3f ms", c.name, c.ttft, want)
		}
	}
	if coldModel-warmModel < 200 {
		t.Errorf("modelled prefill cold %v ms, warm %v ms: want ≈200 ms skipped", coldModel, warmModel)
	}
}

func TestQueueFullAnswers429(t *testing.T) {
	t.Parallel()
	s, ts := startSim(t, Config{MaxNumSeqs: 1, MaxQueue: 1, OutputTokens: 10000, ITLMs: 1, RetryAfterSeconds: 3})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b, _ := json.Marshal(chatBody(true, "hold the slot"))
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, ts.URL+"/v1/chat/completions", strings.NewReader(string(b)))
			if resp, err := http.DefaultClient.Do(req); err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
	}
	deadline := time.Now().Add(5 * time.Second)
	for s.drivers[0].running.Load() != 1 || s.drivers[0].queued.Load() != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("never saw one running and one waiting: running %d, queued %d", s.drivers[0].running.Load(), s.drivers[0].queued.Load())
		}
		time.Sleep(2 * time.Millisecond)
	}
	resp := post(t, context.Background(), ts.URL, "", chatBody(true, "no room"))
	defer resp.Body.Close()
	var body openaiwire.ErrorResponse
	json.NewDecoder(resp.Body).Decode(&body)
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "3" || body.Error.Code == nil || *body.Error.Code != "rate_limit_exceeded" {
		t.Errorf("status %d, Retry-After %q, error %+v; want 429, 3, rate_limit_exceeded", resp.StatusCode, resp.Header.Get("Retry-After"), body.Error)
	}
	cancel()
	wg.Wait()
}

func TestReasoningComesFirst(t *testing.T) {
	t.Parallel()
	for _, field := range []string{"reasoning_content", "reasoning"} {
		t.Run(field, func(t *testing.T) {
			_, ts := startSim(t, Config{ReasoningTokens: 3, ReasoningField: field, OutputTokens: 2})
			lines, _, status, err := streamAll(t, ts.URL, nil, chatBody(true, "think first"))
			if status != 200 || err != nil {
				t.Fatalf("status %d, err %v", status, err)
			}
			var kinds []string
			for _, l := range lines {
				var c struct {
					Choices []struct {
						Delta map[string]any `json:"delta"`
					} `json:"choices"`
				}
				if json.Unmarshal([]byte(l), &c) != nil || len(c.Choices) == 0 {
					continue
				}
				d := c.Choices[0].Delta
				if v, ok := d[field].(string); ok && v != "" {
					kinds = append(kinds, "r")
				}
				if v, ok := d["content"].(string); ok && v != "" {
					kinds = append(kinds, "a")
				}
			}
			if strings.Join(kinds, "") != "rrraa" {
				t.Errorf("delta order %v, want 3 reasoning then 2 answer", kinds)
			}
			u := usageOf(t, lines)["usage"].(map[string]any)
			if u["completion_tokens"].(float64) != 5 || u["completion_tokens_details"].(map[string]any)["reasoning_tokens"].(float64) != 3 {
				t.Errorf("usage %v, want 5 completion tokens of which 3 reasoning", u)
			}
		})
	}
}

func TestFaults(t *testing.T) {
	t.Parallel()
	s, ts := startSim(t, Config{OutputTokens: 6, StallMs: 150, RetryAfterSeconds: 2})
	for _, tt := range []struct {
		fault  string
		status int
	}{{"401", 401}, {"404", 404}, {"429", 429}, {"500", 500}, {"bogus", 400}} {
		_, _, status, _ := streamAll(t, ts.URL, map[string]string{"X-Llmsim-Fault": tt.fault}, chatBody(true, "x"))
		if status != tt.status {
			t.Errorf("fault %s: status %d, want %d", tt.fault, status, tt.status)
		}
	}

	lines, _, _, err := streamAll(t, ts.URL, map[string]string{"X-Llmsim-Fault": "drop"}, chatBody(true, "x y z"))
	if err == nil && len(lines) > 0 && lines[len(lines)-1] == "[DONE]" {
		t.Errorf("drop: stream ended cleanly with %d lines", len(lines))
	}

	lines, _, _, err = streamAll(t, ts.URL, map[string]string{"X-Llmsim-Fault": "malformed"}, chatBody(true, "x y z"))
	bad := 0
	for _, l := range lines {
		if l != "[DONE]" && !json.Valid([]byte(l)) {
			bad++
		}
	}
	if err != nil || bad != 1 || lines[len(lines)-1] != "[DONE]" {
		t.Errorf("malformed: %d invalid chunks (want 1), err %v", bad, err)
	}

	lines, _, _, _ = streamAll(t, ts.URL, map[string]string{"X-Llmsim-Fault": "nochoices"}, chatBody(true, "x y z"))
	missing := 0
	for _, l := range lines {
		var c map[string]any
		if json.Unmarshal([]byte(l), &c) == nil {
			if _, ok := c["choices"]; !ok {
				missing++
			}
		}
	}
	if missing != 1 {
		t.Errorf("nochoices: %d chunks without choices, want 1", missing)
	}

	_, ttft, _, _ := streamAll(t, ts.URL, map[string]string{"X-Llmsim-Fault": "stall"}, chatBody(true, "x y z"))
	if ttft < 150*time.Millisecond {
		t.Errorf("stall: first token after %v, want ≥ 150 ms", ttft)
	}
	if st := s.Stats(); st.Faults != 8 {
		t.Errorf("faults counted %d, want 8 (the bogus header is a 400, not a fault)", st.Faults)
	}

	// by rate: every request fails with 500
	_, ts2 := startSim(t, Config{Faults: "500=1"})
	if _, _, status, _ := streamAll(t, ts2.URL, nil, chatBody(true, "x")); status != 500 {
		t.Errorf("faults 500=1: status %d", status)
	}
	if _, err := New(Config{Faults: "500=0.7,429=0.5"}); err == nil {
		t.Error("fault rates adding up past 1 were accepted")
	}
}

func TestServerTimingsAndMetrics(t *testing.T) {
	t.Parallel()
	_, ts := startSim(t, Config{PrefillMs: 30, OutputTokens: 3, ITLMs: 5, KVCacheBlocks: 100})
	lines, _, status, err := streamAll(t, ts.URL, map[string]string{"X-Llmsim-Timings": "1"}, chatBody(true, "give me timings"))
	if status != 200 || err != nil {
		t.Fatalf("status %d, err %v", status, err)
	}
	c := usageOf(t, lines)
	m, _ := c["metrics"].(map[string]any)
	tm, _ := c["timings"].(map[string]any)
	if m == nil || tm == nil {
		t.Fatalf("usage chunk lacks metrics or timings: %v", c)
	}
	prompt := c["usage"].(map[string]any)["prompt_tokens"].(float64)
	if tm["prompt_n"].(float64)+tm["cache_n"].(float64) != prompt || tm["predicted_n"].(float64) != 3 {
		t.Errorf("timings %v disagree with usage (prompt %v, 3 predicted)", tm, prompt)
	}
	if pm := tm["prompt_ms"].(float64); pm < 30 || pm > 31 {
		t.Errorf("timings prompt_ms %v, want the modelled 30 ms", pm)
	}
	if ft, at := m["first_token_time"].(float64), m["arrival_time"].(float64); ft-at < 0.0299 {
		t.Errorf("metrics first_token_time − arrival_time = %v s, want ≥ 0.030", ft-at)
	}

	resp, err := http.Get(ts.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	text, _ := io.ReadAll(resp.Body)
	for _, name := range []string{"vllm:time_to_first_token_seconds_count{model_name=\"llmsim\"} 1", "vllm:request_queue_time_seconds_bucket",
		"vllm:request_prefill_time_seconds_sum", "vllm:inter_token_latency_seconds_count{model_name=\"llmsim\"} 2",
		"vllm:e2e_request_latency_seconds_bucket", "vllm:num_requests_running", "vllm:num_requests_waiting",
		"vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total"} {
		if !strings.Contains(string(text), name) {
			t.Errorf("/metrics lacks %q", name)
		}
	}
}

func TestBatchingOverHTTP(t *testing.T) {
	t.Parallel()
	s, ts := startSim(t, Config{MaxNumSeqs: 2, PrefillMs: 5, PrefillMsPerToken: 0.01, ITLMs: 2, OutputTokens: 5, ChunkedPrefillTokens: 64, Replicas: 2, Routing: "prefix", KVCacheBlocks: 64})
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lines, _, status, err := streamAll(t, ts.URL, nil, chatBody(true, strings.Repeat("batched words ", 10+i)))
			if status != 200 || err != nil || lines[len(lines)-1] != "[DONE]" {
				errs <- "request failed"
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	if st := s.Stats(); st.Completed != 8 || st.Steps == 0 || st.TokensSent != 40 {
		t.Errorf("stats %+v, want 8 completed over engine steps, 40 tokens", st)
	}
}

// TestPrefillShift: with --prefill-shift-after 2, the third chat request's
// modelled prefill (the timings' prompt_ms) costs --prefill-shift-factor
// times the first two's, on the ideal engine and the batching one.
func TestPrefillShift(t *testing.T) {
	t.Parallel()
	for _, seqs := range []int{0, 4} {
		_, ts := startSim(t, Config{PrefillMs: 20, PrefillMsPerToken: 0.1, OutputTokens: 1, MaxNumSeqs: seqs,
			ServerTimings: true, PrefillShiftAfter: 2, PrefillShiftFactor: 2})
		var got []float64
		for i := range 3 {
			lines, _, status, err := streamAll(t, ts.URL, nil, chatBody(true, fmt.Sprintf("the same length question %d", i)))
			if status != 200 || err != nil {
				t.Fatalf("max-num-seqs %d: status %d, err %v", seqs, status, err)
			}
			got = append(got, usageOf(t, lines)["timings"].(map[string]any)["prompt_ms"].(float64))
		}
		if math.Abs(got[0]-got[1]) > 0.01 || math.Abs(got[2]-2*got[0]) > 0.02 || got[0] < 20 {
			t.Errorf("max-num-seqs %d: modelled prefill %v ms, want the third twice the first two", seqs, got)
		}
	}
	if err := (&Config{PrefillShiftAfter: 5}).validate(); err == nil || !strings.Contains(err.Error(), "prefill-shift-factor") {
		t.Errorf("shift without a factor: %v, want an error naming prefill-shift-factor", err)
	}
}
