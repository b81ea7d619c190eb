package ollama

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"ragtime"
	"ragtime/retrieval"
)

// ollamaServer answers /api/embed as Ollama does: {"embeddings": [...]}, and
// 404 {"error": "model \"x\" not found, try pulling it first"} for an
// unknown model.
type ollamaServer struct {
	mu     sync.Mutex
	inputs [][]string
}

func (s *ollamaServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/api/embed" {
		http.NotFound(w, r)
		return
	}
	var req struct {
		Model string   `json:"model"`
		Input []string `json:"input"`
	}
	json.NewDecoder(r.Body).Decode(&req)
	s.mu.Lock()
	s.inputs = append(s.inputs, req.Input)
	s.mu.Unlock()
	switch req.Model {
	case "nomic-embed-text":
	case "broken":
		w.WriteHeader(500)
		w.Write([]byte(`{"error":"llama runner process has terminated"}`))
		return
	default:
		w.WriteHeader(404)
		w.Write([]byte(`{"error":"model \"` + req.Model + `\" not found, try pulling it first"}`))
		return
	}
	var out [][]float32
	for _, t := range req.Input {
		out = append(out, []float32{float32(len(t)), 1, 0, 0})
	}
	json.NewEncoder(w).Encode(map[string]any{"model": req.Model, "embeddings": out})
}

func TestOllamaEmbedBatches(t *testing.T) {
	t.Parallel()
	srv := &ollamaServer{}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	e, err := New(Config{BaseURL: ts.URL + "/v1/", Model: "nomic-embed-text", Dimensions: 4, BatchSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	vecs, err := e.Embed(context.Background(), []string{"a", "bb", "ccc"})
	if err != nil {
		t.Fatal(err)
	}
	if len(vecs) != 3 || vecs[2][0] != 3 || vecs[0][0] != 1 {
		t.Errorf("vectors %v", vecs)
	}
	if len(srv.inputs) != 2 || len(srv.inputs[0]) != 2 || srv.inputs[1][0] != "ccc" {
		t.Errorf("batches %v: want [a bb] [ccc]", srv.inputs)
	}
	wrong, _ := New(Config{BaseURL: ts.URL, Model: "nomic-embed-text", Dimensions: 768})
	var pe *ragtime.Error
	if _, err := wrong.Embed(context.Background(), []string{"x"}); !errors.As(err, &pe) || !strings.Contains(pe.Hint, "--embed-dimensions") {
		t.Errorf("dimension mismatch: %v", err)
	}
}

func TestOllamaErrorsAreClassified(t *testing.T) {
	t.Parallel()
	ts := httptest.NewServer(&ollamaServer{})
	defer ts.Close()
	for model, code := range map[string]string{"missing": retrieval.CodeEmbedModelNotFound, "broken": retrieval.CodeEmbedUnavailable} {
		e, _ := New(Config{BaseURL: ts.URL, Model: model})
		_, err := e.Embed(context.Background(), []string{"x"})
		var pe *ragtime.Error
		if !errors.As(err, &pe) || pe.Code != code {
			t.Errorf("model %s: %v, want %s", model, err, code)
		}
	}
	e, _ := New(Config{BaseURL: "http://127.0.0.1:1", Model: "m"})
	_, err := e.Embed(context.Background(), []string{"x"})
	var pe *ragtime.Error
	if !errors.As(err, &pe) || pe.Code != retrieval.CodeEmbedUnavailable {
		t.Errorf("no server: %v", err)
	}
	if _, err := New(Config{}); err == nil || !strings.Contains(err.Error(), "--embed-model") {
		t.Errorf("no model: %v", err)
	}
}
