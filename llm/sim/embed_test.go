package sim

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"ragtime/lexical"
	"ragtime/retrieval"

	"ragtime/internal/openaiwire"
)

// postJSON sends body to url+path and decodes the answer into out (when not
// nil), returning the response (body consumed).
func postJSON(t *testing.T, url, path string, body any, out any, header ...string) *http.Response {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, url+path, bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw := new(bytes.Buffer)
	if _, err := raw.ReadFrom(resp.Body); err != nil {
		t.Fatal(err)
	}
	if out != nil && resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(raw.Bytes(), out); err != nil {
			t.Fatalf("%s: decoding %s: %v", path, raw, err)
		}
	}
	if resp.StatusCode != http.StatusOK {
		resp.Header.Set("X-Test-Body", raw.String())
	}
	return resp
}

func hashVectors(t *testing.T, dim int, texts ...string) [][]float32 {
	t.Helper()
	e, err := retrieval.NewHashEmbedder(dim)
	if err != nil {
		t.Fatal(err)
	}
	v, err := e.Embed(context.Background(), texts)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

type openAIEmbeddings struct {
	Object string `json:"object"`
	Model  string `json:"model"`
	Data   []struct {
		Object    string          `json:"object"`
		Index     int             `json:"index"`
		Embedding json.RawMessage `json:"embedding"`
	} `json:"data"`
	Usage struct {
		PromptTokens int `json:"prompt_tokens"`
		TotalTokens  int `json:"total_tokens"`
	} `json:"usage"`
}

func TestEmbeddingsOpenAIWireFormat(t *testing.T) {
	t.Parallel()
	const cost = 30 * time.Millisecond
	s, ts := startSim(t, Config{EmbedMs: 30})
	texts := []string{"prefill dominates time to first token", "decode is one token per step"}

	if lag := s.Stats().AnswerLagP99; lag != 0 {
		t.Errorf("answer lag p99 %g before any answer", lag)
	}
	var one openAIEmbeddings
	start := time.Now()
	resp := postJSON(t, ts.URL, "/v1/embeddings", map[string]any{"model": "text-embedding-3-small", "input": texts[0]}, &one)
	if elapsed := time.Since(start); elapsed < cost {
		t.Errorf("answered after %v, before the configured --embed-ms %v", elapsed, cost)
	}
	if resp.StatusCode != 200 || one.Object != "list" || one.Model != "text-embedding-3-small" || len(one.Data) != 1 || one.Data[0].Object != "embedding" {
		t.Fatalf("status %d, body %+v", resp.StatusCode, one)
	}
	if s.Stats().AnswerLagP99 == 0 {
		t.Error("the answer's wake lag was not recorded")
	}
	var got []float32
	if err := json.Unmarshal(one.Data[0].Embedding, &got); err != nil {
		t.Fatal(err)
	}
	if want := hashVectors(t, 512, texts[0])[0]; !slicesEqual(got, want) {
		t.Errorf("embedding differs from retrieval's hash embedder at 512 dimensions (len %d)", len(got))
	}
	if want := s.counter.Count(texts[0]); one.Usage.PromptTokens != want || one.Usage.TotalTokens != want {
		t.Errorf("usage %+v, want %d tokens", one.Usage, want)
	}

	// an array, a dimension, base64
	var many openAIEmbeddings
	postJSON(t, ts.URL, "/v1/embeddings", map[string]any{"model": "m", "input": texts, "dimensions": 64, "encoding_format": "base64"}, &many)
	want := hashVectors(t, 64, texts...)
	if len(many.Data) != 2 {
		t.Fatalf("got %d embeddings for 2 inputs", len(many.Data))
	}
	for i, d := range many.Data {
		var b64 string
		if err := json.Unmarshal(d.Embedding, &b64); err != nil {
			t.Fatalf("base64 embedding is not a string: %s", d.Embedding)
		}
		raw, err := base64.StdEncoding.DecodeString(b64)
		if err != nil || len(raw) != 4*64 {
			t.Fatalf("base64 embedding: %d bytes, %v", len(raw), err)
		}
		vec := make([]float32, 64)
		for j := range vec {
			vec[j] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*j:]))
		}
		if d.Index != i || !slicesEqual(vec, want[i]) {
			t.Errorf("data[%d]: index %d, vector equal %v", i, d.Index, slicesEqual(vec, want[i]))
		}
	}

	// token ids are decoded with the tokenizer
	var ids openAIEmbeddings
	postJSON(t, ts.URL, "/v1/embeddings", map[string]any{"model": "m", "input": [][]int{s.counter.Encode(texts[1])}}, &ids)
	var fromIDs []float32
	if len(ids.Data) != 1 || json.Unmarshal(ids.Data[0].Embedding, &fromIDs) != nil || !slicesEqual(fromIDs, hashVectors(t, 512, texts[1])[0]) {
		t.Errorf("token-id input did not embed as its text: %+v", ids)
	}
}

func slicesEqual(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestEmbeddingsErrors(t *testing.T) {
	t.Parallel()
	_, ts := startSim(t, Config{APIKey: "k"})
	auth := []string{"Authorization", "Bearer k"}
	cases := []struct {
		name   string
		path   string
		body   any
		status int
		param  string
	}{
		{"no input", "/v1/embeddings", map[string]any{"model": "m"}, 400, "input"},
		{"no model", "/v1/embeddings", map[string]any{"input": "x"}, 400, "model"},
		{"empty string", "/v1/embeddings", map[string]any{"model": "m", "input": []string{"a", ""}}, 400, "input"},
		{"empty array", "/v1/embeddings", map[string]any{"model": "m", "input": []string{}}, 400, "input"},
		{"input object", "/v1/embeddings", map[string]any{"model": "m", "input": map[string]any{"a": 1}}, 400, "input"},
		{"dimensions", "/v1/embeddings", map[string]any{"model": "m", "input": "x", "dimensions": 4}, 400, "dimensions"},
		{"format", "/v1/embeddings", map[string]any{"model": "m", "input": "x", "encoding_format": "int8"}, 400, "encoding_format"},
		{"rerank no query", "/v1/rerank", map[string]any{"documents": []string{"a"}}, 400, "query"},
		{"rerank no documents", "/v1/rerank", map[string]any{"query": "q"}, 400, "documents"},
		{"rerank empty texts", "/rerank", map[string]any{"query": "q", "texts": []string{}}, 400, "texts"},
		{"rerank top_n", "/v1/rerank", map[string]any{"query": "q", "documents": []string{"a"}, "top_n": 0}, 400, "top_n"},
		{"rerank document object", "/v2/rerank", map[string]any{"query": "q", "documents": []any{map[string]any{"title": "a"}}}, 400, "documents"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp := postJSON(t, ts.URL, c.path, c.body, nil, auth...)
			body := resp.Header.Get("X-Test-Body")
			var e openaiwire.ErrorResponse
			if resp.StatusCode != c.status || json.Unmarshal([]byte(body), &e) != nil || e.Error.Param == nil || *e.Error.Param != c.param {
				t.Errorf("status %d body %s; want %d naming %q", resp.StatusCode, body, c.status, c.param)
			}
		})
	}
	if resp := postJSON(t, ts.URL, "/v1/embeddings", map[string]any{"model": "m", "input": "x"}, nil); resp.StatusCode != 401 {
		t.Errorf("without the key: status %d, want 401", resp.StatusCode)
	}
	resp := postJSON(t, ts.URL, "/v1/embeddings", map[string]any{"model": "m", "input": "x"}, nil, append(auth, "X-Llmsim-Fault", "429")...)
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" {
		t.Errorf("forced 429: status %d, Retry-After %q", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	resp = postJSON(t, ts.URL, "/api/embed", map[string]any{"model": "m", "input": "x"}, nil, append(auth, "X-Llmsim-Fault", "404")...)
	if body := resp.Header.Get("X-Test-Body"); resp.StatusCode != 404 || !strings.HasPrefix(body, `{"error":"`) {
		t.Errorf("forced 404 on Ollama's endpoint: status %d body %s, want Ollama's {\"error\": ...}", resp.StatusCode, body)
	}
}

func TestEmbeddingsOllamaWireFormat(t *testing.T) {
	t.Parallel()
	_, ts := startSim(t, Config{})
	texts := []string{"first text", "second text about rerankers"}
	var out struct {
		Model           string      `json:"model"`
		Embeddings      [][]float32 `json:"embeddings"`
		PromptEvalCount int         `json:"prompt_eval_count"`
		TotalDuration   int64       `json:"total_duration"`
	}
	resp := postJSON(t, ts.URL, "/api/embed", map[string]any{"model": "nomic-embed-text", "input": texts, "dimensions": 32}, &out)
	want := hashVectors(t, 32, texts...)
	if resp.StatusCode != 200 || out.Model != "nomic-embed-text" || len(out.Embeddings) != 2 || out.PromptEvalCount == 0 {
		t.Fatalf("status %d, %+v", resp.StatusCode, out)
	}
	for i := range want {
		if !slicesEqual(out.Embeddings[i], want[i]) {
			t.Errorf("embeddings[%d] differs from the hash embedder's", i)
		}
	}
}

func TestRerankBothShapes(t *testing.T) {
	t.Parallel()
	const cost = 10*time.Millisecond + 3*5*time.Millisecond
	_, ts := startSim(t, Config{RerankMs: 10, RerankMsPerDoc: 5})
	query := "how does chunked prefill cut the TTFT tail"
	docs := []string{
		"the weather is nice today",
		"chunked prefill interleaves prefill chunks with decode steps, which cuts the TTFT tail",
		"prefill time grows with prompt length",
	}
	words := make([][]string, len(docs))
	for i, d := range docs {
		words[i] = lexical.Words(d)
	}
	bm25 := lexical.NewBM25().Score(lexical.ContentWords(query), words)

	// TEI: POST /rerank {query, texts} -> [{index, score}], best first
	var tei []struct {
		Index int     `json:"index"`
		Score float64 `json:"score"`
		Text  string  `json:"text"`
	}
	start := time.Now()
	postJSON(t, ts.URL, "/rerank", map[string]any{"query": query, "texts": docs, "raw_scores": true, "return_text": true}, &tei)
	if elapsed := time.Since(start); elapsed < cost {
		t.Errorf("answered after %v, before --rerank-ms + 3 × --rerank-ms-per-doc = %v", elapsed, cost)
	}
	if len(tei) != 3 || tei[0].Index != 1 || tei[1].Index != 2 || tei[2].Index != 0 {
		t.Fatalf("TEI order %+v, want indexes 1, 2, 0", tei)
	}
	for _, r := range tei {
		if math.Abs(r.Score-bm25[r.Index]) > 1e-9 || r.Text != docs[r.Index] {
			t.Errorf("raw score of %d is %g, BM25 says %g (text %q)", r.Index, r.Score, bm25[r.Index], r.Text)
		}
	}

	// Cohere / Jina: POST /v1/rerank {model, query, documents, top_n} -> {results: [{index, relevance_score}]}
	var co struct {
		Results []struct {
			Index          int                    `json:"index"`
			RelevanceScore float64                `json:"relevance_score"`
			Document       *struct{ Text string } `json:"document"`
		} `json:"results"`
	}
	postJSON(t, ts.URL, "/v1/rerank", map[string]any{"model": "rerank-v3.5", "query": query, "documents": docs, "top_n": 2}, &co)
	if len(co.Results) != 2 || co.Results[0].Index != 1 || co.Results[1].Index != 2 {
		t.Fatalf("Cohere results %+v, want the top 2: indexes 1, 2", co.Results)
	}
	if r := co.Results[0]; r.RelevanceScore <= co.Results[1].RelevanceScore || r.RelevanceScore >= 1 || r.Document != nil {
		t.Errorf("relevance scores %+v: want decreasing, in [0, 1), no document unless asked", co.Results)
	}
	// documents as objects, return_documents
	objs := []map[string]string{{"text": docs[0]}, {"text": docs[1]}}
	postJSON(t, ts.URL, "/v2/rerank", map[string]any{"model": "jina-reranker-v2", "query": query, "documents": objs, "return_documents": true}, &co)
	if len(co.Results) != 2 || co.Results[0].Index != 1 || co.Results[0].Document == nil || co.Results[0].Document.Text != docs[1] {
		t.Errorf("object documents: %+v", co.Results)
	}
}
