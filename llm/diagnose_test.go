package llm

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// replayFile answers with testdata/name as JSON.
func replayFile(t *testing.T, name string) http.HandlerFunc {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(raw)
	}
}

// statusOf finds a check by name.
func statusOf(checks []Check, name string) (Check, bool) {
	for _, c := range checks {
		if c.Name == name {
			return c, true
		}
	}
	return Check{}, false
}

// TestDiagnoseModelMatching replays llama.cpp's server and Ollama as they
// answered doctor: a model missing from the listing only warns, with the
// listed names, and the first-token request decides; Ollama's rnd is
// rnd:latest.
func TestDiagnoseModelMatching(t *testing.T) {
	t.Parallel()
	llama := http.NewServeMux()
	llama.Handle("GET /v1/models", replayFile(t, "llamacpp_models.json"))
	llama.Handle("POST /v1/chat/completions", pacedReplay(t, "paced_llamacpp_timings.sse", "text/event-stream", 0, nil))
	llamaSrv := newServer(t, llama)

	ollama := http.NewServeMux()
	ollama.Handle("GET /api/tags", replayFile(t, "ollama_tags.json"))
	ollama.HandleFunc("POST /api/chat", func(w http.ResponseWriter, r *http.Request) {
		var body strings.Builder
		buf := make([]byte, 4096)
		for {
			n, err := r.Body.Read(buf)
			body.Write(buf[:n])
			if err != nil {
				break
			}
		}
		// Ollama serves rnd and rnd:latest alike, and nothing else
		if !strings.Contains(body.String(), `"model":"rnd"`) && !strings.Contains(body.String(), `"model":"rnd:latest"`) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"error":"model \"nope\" not found, try pulling it first"}`))
			return
		}
		pacedReplay(t, "paced_ollama_rnd.ndjson", "application/x-ndjson", 0, nil)(w, r)
	})
	ollamaSrv := newServer(t, ollama)

	for _, tt := range []struct {
		name, provider, base, model string
		models                      CheckStatus
		modelsHas                   []string
		first                       CheckStatus
		firstHas                    []string
	}{
		{name: "llama.cpp answers any name", provider: ProviderOpenAI, base: llamaSrv.URL + "/v1", model: "any",
			models: CheckWarn, modelsHas: []string{`"any" is not among the 1 models`, "/models/rnd-llama.gguf"}, first: CheckOK, firstHas: []string{"TTFT"}},
		{name: "llama.cpp's model by its file name", provider: ProviderOpenAI, base: llamaSrv.URL + "/v1", model: "rnd-llama",
			models: CheckOK, modelsHas: []string{`"rnd-llama" among them as "/models/rnd-llama.gguf"`}, first: CheckOK},
		{name: "ollama rnd is rnd:latest", provider: ProviderOllama, base: ollamaSrv.URL, model: "rnd",
			models: CheckOK, modelsHas: []string{`"rnd" among them as "rnd:latest"`}, first: CheckOK},
		{name: "ollama rnd:latest", provider: ProviderOllama, base: ollamaSrv.URL, model: "rnd:latest",
			models: CheckOK, modelsHas: []string{`"rnd:latest" among them`}, first: CheckOK},
		{name: "ollama unknown model", provider: ProviderOllama, base: ollamaSrv.URL, model: "nope",
			models: CheckWarn, modelsHas: []string{"rnd:latest"}, first: CheckFail, firstHas: []string{"one of: rnd:latest"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			checks := Diagnose(context.Background(), DiagnoseConfig{Provider: tt.provider, CheckTimeout: 5 * time.Second,
				Config: Config{BaseURL: tt.base, Model: tt.model}})
			models, ok1 := statusOf(checks, "models")
			first, ok2 := statusOf(checks, "first token")
			if !ok1 || !ok2 {
				t.Fatalf("checks stop before the first token: %+v", checks)
			}
			if models.Status != tt.models || first.Status != tt.first {
				t.Errorf("models %s, first token %s; want %s, %s\n%+v", models.Status, first.Status, tt.models, tt.first, checks)
			}
			for _, s := range tt.modelsHas {
				if !strings.Contains(models.Detail, s) {
					t.Errorf("models check %q lacks %q", models.Detail, s)
				}
			}
			for _, s := range tt.firstHas {
				if !strings.Contains(first.Detail+" "+first.Hint, s) {
					t.Errorf("first-token check %+v lacks %q", first, s)
				}
			}
		})
	}
}

func TestMatchModel(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		provider, model string
		listed          []string
		want            string
		ok              bool
	}{
		{ProviderOllama, "rnd", []string{"qwen3:8b", "rnd:latest"}, "rnd:latest", true},
		{ProviderOllama, "rnd:latest", []string{"rnd"}, "rnd", true},
		{ProviderOllama, "rnd:q4", []string{"rnd:latest"}, "", false},
		{ProviderOpenAI, "rnd", []string{"rnd:latest"}, "rnd:latest", true}, // Ollama's /v1 lists tags too
		{ProviderOpenAI, "gpt-4o", []string{"gpt-4o-mini"}, "", false},
		{ProviderAnthropic, "claude-sonnet-4-5", []string{"claude-sonnet-4-5-20250929"}, "claude-sonnet-4-5-20250929", true},
		// llama-server lists the path of the file it loaded.
		{ProviderOpenAI, "qwen2.5-0.5b-instruct-q4_k_m", []string{"/models/qwen2.5-0.5b-instruct-q4_k_m.gguf"}, "/models/qwen2.5-0.5b-instruct-q4_k_m.gguf", true},
		{ProviderOpenAI, "qwen2.5-0.5b-instruct-q4_k_m.gguf", []string{"/models/qwen2.5-0.5b-instruct-q4_k_m.gguf"}, "/models/qwen2.5-0.5b-instruct-q4_k_m.gguf", true},
		{ProviderOpenAI, "/models/qwen.GGUF", []string{"models/qwen.GGUF"}, "models/qwen.GGUF", true},
		{ProviderOpenAI, "qwen", []string{`C:\models\qwen.gguf`}, `C:\models\qwen.gguf`, true},
		{ProviderOpenAI, "qwen", []string{"/models/qwen-7b.gguf"}, "", false},
		{ProviderOpenAI, "models", []string{"/models/qwen.gguf"}, "", false},
	} {
		got, ok := MatchModel(tt.provider, tt.model, tt.listed)
		if got != tt.want || ok != tt.ok {
			t.Errorf("MatchModel(%s, %q, %q) = %q, %v; want %q, %v", tt.provider, tt.model, tt.listed, got, ok, tt.want, tt.ok)
		}
	}
}

// TestDiagnoseUnknownProvider fails at the first step, naming the flag,
// rather than reporting a key or a base URL ok for a provider that cannot run.
func TestDiagnoseUnknownProvider(t *testing.T) {
	t.Parallel()
	checks := Diagnose(context.Background(), DiagnoseConfig{Provider: "nope", Config: Config{BaseURL: "http://127.0.0.1:1"}})
	if len(checks) != 1 {
		t.Fatalf("got %d checks %+v, want the provider check alone", len(checks), checks)
	}
	c := checks[0]
	if c.Name != "provider" || c.Status != CheckFail || !strings.Contains(c.Detail, `"nope"`) || !strings.Contains(c.Hint, "extractive") {
		t.Fatalf("check = %+v, want a failed provider check naming nope and the providers", c)
	}
}
