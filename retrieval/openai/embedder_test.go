package openai

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"ragtime/pipeline"
	"ragtime/retrieval"
)

// embeddingsServer is a small OpenAI-compatible /v1/embeddings server: the
// vector of a text is [len(text), first byte, dims...]. llm/sim did not
// serve /v1/embeddings when this was written, so the tests bring their own.
type embeddingsServer struct {
	mu       sync.Mutex
	requests []map[string]any
	auth     []string
	status   int    // answer every request with this status when set
	body     string // and this body
	delay    time.Duration
}

// set changes how the server answers; the handler of a request the client
// gave up on may still be reading these, hence the lock.
func (s *embeddingsServer) set(status int, body string, delay time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.status, s.body, s.delay = status, body, delay
}

func (s *embeddingsServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/embeddings" || r.Method != http.MethodPost {
		http.NotFound(w, r)
		return
	}
	var req struct {
		Model      string   `json:"model"`
		Input      []string `json:"input"`
		Dimensions int      `json:"dimensions"`
	}
	raw := map[string]any{}
	json.NewDecoder(r.Body).Decode(&raw)
	b, _ := json.Marshal(raw)
	json.Unmarshal(b, &req)
	s.mu.Lock()
	s.requests = append(s.requests, raw)
	s.auth = append(s.auth, r.Header.Get("Authorization"))
	status, body, delay := s.status, s.body, s.delay
	s.mu.Unlock()
	if delay > 0 {
		time.Sleep(delay)
	}
	if status != 0 {
		w.WriteHeader(status)
		w.Write([]byte(body))
		return
	}
	dim := req.Dimensions
	if dim == 0 {
		dim = 3
	}
	type item struct {
		Object    string    `json:"object"`
		Index     int       `json:"index"`
		Embedding []float32 `json:"embedding"`
	}
	var data []item
	for i, t := range req.Input {
		v := make([]float32, dim)
		v[0] = float32(len(t))
		if len(t) > 0 {
			v[1] = float32(t[0])
		}
		data = append(data, item{"embedding", i, v})
	}
	json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": data, "model": req.Model})
}

func start(t *testing.T) (*embeddingsServer, string) {
	s := &embeddingsServer{}
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	return s, ts.URL + "/v1"
}

func TestEmbedBatchesInOrderWithoutTouchingInput(t *testing.T) {
	t.Parallel()
	srv, url := start(t)
	e, err := New(Config{BaseURL: url, Model: "text-embedding-3-small", Dimensions: 8, APIKey: "sk-test-key-123456", KeyVar: "RAGTIME_EMBED_API_KEY", BatchSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	texts := []string{"a\nb", "bb", "ccc", "dddd", "e"}
	orig := slices.Clone(texts)
	vecs, err := e.Embed(context.Background(), texts)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(texts, orig) {
		t.Errorf("input changed to %q", texts)
	}
	if len(vecs) != 5 {
		t.Fatalf("%d vectors", len(vecs))
	}
	for i, v := range vecs {
		if len(v) != 8 || v[0] != float32(len(orig[i])) || v[1] != float32(orig[i][0]) {
			t.Errorf("vector %d = %v: not the embedding of %q", i, v, orig[i])
		}
	}
	if len(srv.requests) != 3 {
		t.Fatalf("%d requests, want 3 batches of at most 2", len(srv.requests))
	}
	r0 := srv.requests[0]
	if r0["model"] != "text-embedding-3-small" || r0["dimensions"] != float64(8) || r0["input"].([]any)[0] != "a\nb" {
		t.Errorf("request %v: want model, dimensions and the text verbatim (newline kept)", r0)
	}
	if srv.auth[0] != "Bearer sk-test-key-123456" {
		t.Errorf("authorization %q", srv.auth[0])
	}
	if e.Name() != "openai:text-embedding-3-small" {
		t.Errorf("Name = %q", e.Name())
	}
}

func TestEmbedErrorsAreClassified(t *testing.T) {
	t.Parallel()
	cases := []struct {
		status int
		body   string
		code   string
		hint   string
	}{
		{401, `{"error":{"message":"Incorrect API key provided: sk-te****3456"}}`, retrieval.CodeEmbedAuth, "RAGTIME_EMBED_API_KEY"},
		{404, `{"error":{"message":"The model 'nope' does not exist","code":"model_not_found"}}`, retrieval.CodeEmbedModelNotFound, "--embed-model"},
		{400, `{"error":{"message":"model nope not found"}}`, retrieval.CodeEmbedModelNotFound, "--embed-model"},
		{503, `overloaded`, retrieval.CodeEmbedUnavailable, "retry"},
		{429, `{"error":"slow down"}`, retrieval.CodeEmbedRateLimited, "--embed-concurrency"},
		{400, `{"error":{"message":"dimensions not supported"}}`, retrieval.CodeEmbedBadRequest, "--embed-dimensions"},
	}
	for _, c := range cases {
		srv, url := start(t)
		srv.set(c.status, c.body, 0)
		e, err := New(Config{BaseURL: url, Model: "nope", KeyVar: "RAGTIME_EMBED_API_KEY", APIKey: "sk-test-key-123456"})
		if err != nil {
			t.Fatal(err)
		}
		_, err = e.Embed(context.Background(), []string{"x"})
		var pe *pipeline.Error
		if !errors.As(err, &pe) || pe.Code != c.code || pe.Status != c.status || !strings.Contains(pe.Hint, c.hint) {
			t.Errorf("HTTP %d %s: got %v (hint %q), want %s", c.status, c.body, err, hintOf(pe), c.code)
		}
		if strings.Contains(err.Error(), "sk-te") || strings.Contains(err.Error(), "3456") {
			t.Errorf("error %q leaks the key", err)
		}
	}
}

func hintOf(pe *pipeline.Error) string {
	if pe == nil {
		return ""
	}
	return pe.Hint
}

func TestEmbedTransportErrors(t *testing.T) {
	t.Parallel()
	srv, url := start(t)
	srv.set(0, "", 300*time.Millisecond)
	e, _ := New(Config{BaseURL: url, Model: "m", Timeout: 50 * time.Millisecond})
	_, err := e.Embed(context.Background(), []string{"x"})
	var pe *pipeline.Error
	if !errors.As(err, &pe) || pe.Code != retrieval.CodeEmbedTimeout {
		t.Errorf("slow server: %v, want embed_timeout", err)
	}
	down, _ := New(Config{BaseURL: "http://127.0.0.1:1/v1", Model: "m"})
	_, err = down.Embed(context.Background(), []string{"x"})
	if !errors.As(err, &pe) || pe.Code != retrieval.CodeEmbedUnavailable || !strings.Contains(pe.Message, "127.0.0.1:1") {
		t.Errorf("no server: %v, want embed_unavailable naming the address", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := e.Embed(ctx, []string{"x"}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
	srv.set(0, "", 0)
	e8, _ := New(Config{BaseURL: url, Model: "m", Dimensions: 0})
	if v, err := e8.Embed(context.Background(), []string{"x"}); err != nil || len(v[0]) != 3 {
		t.Errorf("model's own dimension: %v %v", v, err)
	}
}

func TestNewNamesTheFlag(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		cfg  Config
		flag string
	}{
		{Config{Model: "m"}, "--embed-base-url"},
		{Config{BaseURL: "localhost:1234", Model: "m"}, "--embed-base-url"},
		{Config{BaseURL: "http://x/v1"}, "--embed-model"},
		{Config{BaseURL: "http://x/v1", Model: "m", Dimensions: -1}, "--embed-dimensions"},
	} {
		if _, err := New(c.cfg); err == nil || !strings.Contains(err.Error(), c.flag) {
			t.Errorf("%+v: %v, want an error naming %s", c.cfg, err, c.flag)
		}
	}
}
