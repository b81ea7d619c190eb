package sim

import (
	"encoding/json"
	"strings"
	"testing"

	"ragtime/internal/openaiwire"
)

// These tests pin where llmsim behaves as the servers it stands for (OpenAI,
// vLLM, llama.cpp's server) rather than as is easiest to write.

func TestMaxTokensBoundsReasoningToo(t *testing.T) {
	t.Parallel()
	_, ts := startSim(t, Config{ReasoningTokens: 5, OutputTokens: 3})
	for _, tt := range []struct {
		maxTokens            int
		reasoning, answer    float64
		finish, deltaPattern string
	}{
		{maxTokens: 4, reasoning: 4, answer: 0, finish: "length", deltaPattern: "rrrr"},
		{maxTokens: 6, reasoning: 5, answer: 1, finish: "length", deltaPattern: "rrrrra"},
		{maxTokens: 8, reasoning: 5, answer: 3, finish: "stop", deltaPattern: "rrrrraaa"},
	} {
		body := chatBody(true, "think then answer")
		body["max_tokens"] = tt.maxTokens
		lines, _, status, err := streamAll(t, ts.URL, nil, body)
		if status != 200 || err != nil {
			t.Fatalf("max_tokens %d: status %d, err %v", tt.maxTokens, status, err)
		}
		var kinds, finish string
		for _, l := range lines {
			var c struct {
				Choices []struct {
					Delta        map[string]any `json:"delta"`
					FinishReason *string        `json:"finish_reason"`
				} `json:"choices"`
			}
			if json.Unmarshal([]byte(l), &c) != nil || len(c.Choices) == 0 {
				continue
			}
			if v, _ := c.Choices[0].Delta["reasoning_content"].(string); v != "" {
				kinds += "r"
			}
			if v, _ := c.Choices[0].Delta["content"].(string); v != "" {
				kinds += "a"
			}
			if c.Choices[0].FinishReason != nil {
				finish = *c.Choices[0].FinishReason
			}
		}
		u := usageOf(t, lines)["usage"].(map[string]any)
		r := 0.0
		if d, ok := u["completion_tokens_details"].(map[string]any); ok {
			r = d["reasoning_tokens"].(float64)
		}
		if kinds != tt.deltaPattern || finish != tt.finish || u["completion_tokens"].(float64) != tt.reasoning+tt.answer || r != tt.reasoning {
			t.Errorf("max_tokens %d: deltas %q finish %q usage %v; want %q, %q, %v reasoning of %v", tt.maxTokens, kinds, finish, u, tt.deltaPattern, tt.finish, tt.reasoning, tt.reasoning+tt.answer)
		}
	}
}

func TestUsageIsNullOnEveryChunkButTheLast(t *testing.T) {
	t.Parallel()
	_, ts := startSim(t, Config{OutputTokens: 3})
	lines, _, status, err := streamAll(t, ts.URL, nil, chatBody(true, "a b c"))
	if status != 200 || err != nil {
		t.Fatalf("status %d, err %v", status, err)
	}
	withUsage := 0
	for _, l := range lines {
		if l == "[DONE]" {
			continue
		}
		var c map[string]json.RawMessage
		if err := json.Unmarshal([]byte(l), &c); err != nil {
			t.Fatalf("chunk %s: %v", l, err)
		}
		u, ok := c["usage"]
		switch {
		case !ok:
			t.Errorf("chunk %s has no usage field; with include_usage OpenAI sends it on every chunk", l)
		case string(u) == "null":
		default:
			withUsage++
		}
	}
	if withUsage != 1 || !strings.Contains(lines[len(lines)-2], `"prompt_tokens"`) {
		t.Errorf("%d chunks carry a usage object, want exactly one, the last before [DONE]:\n%s", withUsage, strings.Join(lines, "\n"))
	}

	body := chatBody(true, "a b c")
	delete(body, "stream_options")
	lines, _, _, _ = streamAll(t, ts.URL, nil, body)
	for _, l := range lines {
		if strings.Contains(l, `"usage"`) {
			t.Errorf("without include_usage chunk %s carries usage", l)
		}
	}
}

func TestPromptTokensCountTheChatTemplate(t *testing.T) {
	t.Parallel()
	_, ts := startSim(t, Config{OutputTokens: 1})
	body := map[string]any{"model": "m", "stream": true, "stream_options": map[string]any{"include_usage": true},
		"messages": []map[string]string{{"role": "user", "content": "hi"}}}
	lines, _, _, err := streamAll(t, ts.URL, nil, body)
	if err != nil {
		t.Fatal(err)
	}
	// <|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n
	if got := usageOf(t, lines)["usage"].(map[string]any)["prompt_tokens"].(float64); got != 9 {
		t.Errorf("\"hi\" counts %v prompt tokens, want 9 with the ChatML template (not 1)", got)
	}
}

func TestModelFlagHoldsForEmbeddings(t *testing.T) {
	t.Parallel()
	_, ts := startSim(t, Config{Model: "embedder"})
	if resp := postJSON(t, ts.URL, "/v1/embeddings", map[string]any{"model": "embedder", "input": "x"}, nil); resp.StatusCode != 200 {
		t.Errorf("the served model: status %d %s", resp.StatusCode, resp.Header.Get("X-Test-Body"))
	}
	resp := postJSON(t, ts.URL, "/v1/embeddings", map[string]any{"model": "other", "input": "x"}, nil)
	var e openaiwire.ErrorResponse
	body := resp.Header.Get("X-Test-Body")
	if resp.StatusCode != 404 || json.Unmarshal([]byte(body), &e) != nil || e.Error.Code == nil || *e.Error.Code != "model_not_found" || !strings.Contains(e.Error.Message, `"embedder"`) {
		t.Errorf("another model on /v1/embeddings: status %d body %s, want 404 model_not_found naming the served model", resp.StatusCode, body)
	}
	resp = postJSON(t, ts.URL, "/api/embed", map[string]any{"model": "other", "input": "x"}, nil)
	if body := resp.Header.Get("X-Test-Body"); resp.StatusCode != 404 || !strings.HasPrefix(body, `{"error":"`) {
		t.Errorf("another model on /api/embed: status %d body %s, want 404 in Ollama's shape", resp.StatusCode, body)
	}
}

func TestPrefixCacheIsOnByDefault(t *testing.T) {
	t.Parallel()
	if DefaultConfig().KVCacheBlocks != DefaultKVCacheBlocks || DefaultKVCacheBlocks <= 0 {
		t.Fatalf("DefaultConfig().KVCacheBlocks = %d, want %d (on, as vLLM's)", DefaultConfig().KVCacheBlocks, DefaultKVCacheBlocks)
	}
	system := strings.Repeat("Answer only from the context below. ", 20)
	cached := func(cfg Config) float64 {
		_, ts := startSim(t, cfg)
		var last float64
		for range 2 {
			body := chatBody(true, "what is prefill?")
			body["messages"].([]map[string]any)[0]["content"] = system
			lines, _, _, err := streamAll(t, ts.URL, nil, body)
			if err != nil {
				t.Fatal(err)
			}
			last = usageOf(t, lines)["usage"].(map[string]any)["prompt_tokens_details"].(map[string]any)["cached_tokens"].(float64)
		}
		return last
	}
	on := DefaultConfig()
	on.PrefillMs, on.PrefillMsPerToken, on.PrefillMsQuadratic, on.ITLMs, on.OutputTokens = 0, 0, 0, 0, 1
	off := on
	off.KVCacheBlocks = 0 // --kv-cache-blocks 0
	if got := cached(on); got < 16 {
		t.Errorf("defaults: the repeated prompt had %v cached tokens, want its full blocks", got)
	}
	if got := cached(off); got != 0 {
		t.Errorf("--kv-cache-blocks 0: %v cached tokens, want 0", got)
	}
}
