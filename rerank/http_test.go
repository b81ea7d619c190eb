package rerank

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
	"ragtime/pipeline"
)

// rerankServer serves both request shapes (llm/sim did not serve /v1/rerank
// when this was written): the score of a text is how many of the query's
// words it contains.
type rerankServer struct {
	mu       sync.Mutex
	paths    []string
	bodies   []map[string]any
	auth     []string
	status   int
	response string // sent verbatim when set
}

func (s *rerankServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body map[string]any
	json.NewDecoder(r.Body).Decode(&body)
	s.mu.Lock()
	s.paths = append(s.paths, r.URL.Path)
	s.bodies = append(s.bodies, body)
	s.auth = append(s.auth, r.Header.Get("Authorization"))
	status, response := s.status, s.response
	s.mu.Unlock()
	if status != 0 {
		w.WriteHeader(status)
		w.Write([]byte(`{"error":"nope"}`))
		return
	}
	if response != "" {
		w.Write([]byte(response))
		return
	}
	query, _ := body["query"].(string)
	score := func(t string) float64 {
		n := 0.0
		for _, w := range strings.Fields(query) {
			if strings.Contains(t, w) {
				n++
			}
		}
		return n
	}
	switch r.URL.Path {
	case "/rerank":
		var out []map[string]any
		for i, t := range body["texts"].([]any) {
			out = append(out, map[string]any{"index": i, "score": score(t.(string))})
		}
		json.NewEncoder(w).Encode(out)
	case "/v1/rerank":
		var out []map[string]any
		for i, t := range body["documents"].([]any) {
			out = append(out, map[string]any{"index": i, "relevance_score": score(t.(string))})
		}
		json.NewEncoder(w).Encode(map[string]any{"results": out})
	default:
		http.NotFound(w, r)
	}
}

func candidates() []pipeline.Hit {
	return []pipeline.Hit{
		{Chunk: pipeline.Chunk{ID: "a", Title: "A", Text: "nothing relevant"}, Score: 0.9},
		{Chunk: pipeline.Chunk{ID: "b", Title: "B", Text: "prefill cost grows"}, Score: 0.8},
		{Chunk: pipeline.Chunk{ID: "c", Title: "C", Text: "prefill"}, Score: 0.7},
	}
}

func TestHTTPRerankBothShapes(t *testing.T) {
	t.Parallel()
	srv := &rerankServer{}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	for _, shape := range []string{ShapeTEI, ShapeCohere} {
		r, err := NewHTTP(HTTPConfig{URL: ts.URL, Shape: shape, Model: "rerank-v3", APIKey: "k-123", KeyVar: "RAGTIME_RERANK_API_KEY"})
		if err != nil {
			t.Fatal(err)
		}
		got, err := r.Rerank(context.Background(), "prefill cost", candidates(), 2)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 2 || got[0].ID != "b" || got[1].ID != "c" || *got[0].RerankScore != 2 || got[0].Score != 0.8 {
			t.Errorf("%s: reranked %+v", shape, got)
		}
	}
	if srv.paths[0] != "/rerank" || srv.paths[1] != "/v1/rerank" {
		t.Errorf("paths %v", srv.paths)
	}
	if tei := srv.bodies[0]; tei["query"] != "prefill cost" || len(tei["texts"].([]any)) != 3 || tei["texts"].([]any)[1] != "B\nprefill cost grows" {
		t.Errorf("TEI body %v", tei)
	}
	if co := srv.bodies[1]; co["model"] != "rerank-v3" || co["top_n"] != float64(3) || len(co["documents"].([]any)) != 3 {
		t.Errorf("Cohere body %v", co)
	}
	if srv.auth[0] != "Bearer k-123" {
		t.Errorf("auth %q", srv.auth[0])
	}
}

func TestHTTPRerankFailures(t *testing.T) {
	t.Parallel()
	srv := &rerankServer{}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	r, _ := NewHTTP(HTTPConfig{URL: ts.URL, Shape: ShapeTEI, KeyVar: "RAGTIME_RERANK_API_KEY"})
	for _, c := range []struct {
		status   int
		response string
		code     string
	}{
		{401, "", CodeRerankAuth},
		{503, "", CodeRerankUnavailable},
		{422, "", CodeRerankRejected},
		{0, `[{"index":0,"score":1}]`, CodeRerankBadResponse},
		{0, `[{"index":0,"score":1},{"index":0,"score":1},{"index":2,"score":1}]`, CodeRerankBadResponse},
		{0, `{"results":[]}`, CodeRerankBadResponse},
	} {
		srv.status, srv.response = c.status, c.response
		_, err := r.Rerank(context.Background(), "q", candidates(), 2)
		var pe *ragtime.Error
		if !errors.As(err, &pe) || pe.Code != c.code {
			t.Errorf("status %d response %s: %v, want %s", c.status, c.response, err, c.code)
		}
	}
	down, _ := NewHTTP(HTTPConfig{URL: "http://127.0.0.1:1", Shape: ShapeTEI})
	_, err := down.Rerank(context.Background(), "q", candidates(), 2)
	var pe *ragtime.Error
	if !errors.As(err, &pe) || pe.Code != CodeRerankUnavailable {
		t.Errorf("down: %v", err)
	}
	for _, bad := range []HTTPConfig{{URL: "tei:8080", Shape: ShapeTEI}, {URL: "http://x", Shape: "jina2"}, {URL: "http://x", Shape: ShapeCohere}} {
		if _, err := NewHTTP(bad); err == nil || !strings.Contains(err.Error(), "--rerank-") {
			t.Errorf("%+v: %v", bad, err)
		}
	}
}

// TestHTTPRerankErrorsHideURLCredentials: error messages reach the SSE
// stream, the query row and the logs, so a password in --rerank-url must
// not appear in them.
func TestHTTPRerankErrorsHideURLCredentials(t *testing.T) {
	t.Parallel()
	srv := &rerankServer{}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	withCreds := strings.Replace(ts.URL, "http://", "http://user:s3cret-pass@", 1)
	r, err := NewHTTP(HTTPConfig{URL: withCreds, Shape: ShapeTEI})
	if err != nil {
		t.Fatal(err)
	}
	for _, status := range []int{401, 503, 422} {
		srv.status, srv.response = status, ""
		_, err := r.Rerank(context.Background(), "q", candidates(), 2)
		if err == nil || strings.Contains(err.Error(), "s3cret-pass") {
			t.Errorf("status %d: %v", status, err)
		}
	}
	down, _ := NewHTTP(HTTPConfig{URL: "http://user:s3cret-pass@127.0.0.1:1", Shape: ShapeTEI})
	if _, err := down.Rerank(context.Background(), "q", candidates(), 2); err == nil || strings.Contains(err.Error(), "s3cret-pass") {
		t.Errorf("down: %v", err)
	}
	if _, err := NewHTTP(HTTPConfig{URL: "ftp://user:s3cret-pass@x", Shape: ShapeTEI}); err == nil || strings.Contains(err.Error(), "s3cret-pass") {
		t.Errorf("bad scheme: %v", err)
	}
}
