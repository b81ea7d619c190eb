package llm

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"ragtime"
	"ragtime/internal/upstream"
	"ragtime/pipeline"
	"ragtime/retrieval"
)

// closingServer serves basic.sse; with closeEach it closes the connection
// after every answer, as llama-server does. It counts the connections.
func closingServer(t *testing.T, closeEach bool) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	h := replay(t, "basic.sse")
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if closeEach {
			w.Header().Set("Connection", "close")
		}
		h(w, r)
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, &conns
}

func pooledClient(t *testing.T, srv *httptest.Server) *OpenAI {
	return newOpenAIClient(t, srv.URL+"/v1", func(c *OpenAIConfig) { c.Pool = upstream.NewPool(upstream.Options{}) })
}

// Against a server that closes after every stream, the call after a
// Prewarm takes the connection dialled for it: no dial on its path, and
// the dial's cost reported apart.
func TestPrewarmTakesTheDialOffThePath(t *testing.T) {
	t.Parallel()
	srv, conns := closingServer(t, true)
	g := pooledClient(t, srv)
	_, gen, err := collect(t, g, context.Background(), testRequest)
	if err != nil {
		t.Fatal(err)
	}
	if gen.Conn.Prewarmed || gen.Conn.Connect <= 0 {
		t.Fatalf("first call: %+v; want a connection dialled on the path", gen.Conn)
	}
	for i := range 3 {
		g.Prewarm(context.Background())
		_, gen, err = collect(t, g, context.Background(), testRequest)
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if !gen.Conn.Prewarmed || gen.Conn.Prewarm <= 0 || gen.Conn.Connect != 0 || gen.Conn.DNS != 0 || gen.Conn.Reused {
			t.Fatalf("call %d after Prewarm: %+v; want the prewarmed connection, no dial on the path", i, gen.Conn)
		}
	}
	if n := conns.Load(); n != 4 {
		t.Fatalf("the server saw %d connections for 4 calls; want 4 (none wasted)", n)
	}
}

// Against a keep-alive server the idle connection is reused and Prewarm
// dials nothing.
func TestPrewarmLeavesAKeptAliveConnection(t *testing.T) {
	t.Parallel()
	srv, conns := closingServer(t, false)
	g := pooledClient(t, srv)
	if _, _, err := collect(t, g, context.Background(), testRequest); err != nil {
		t.Fatal(err)
	}
	// The connection goes back to the pool after the body's end was read,
	// which may be just after the call returned.
	deadline := time.Now().Add(5 * time.Second)
	for !g.http.Idle() && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if g.http.Prewarm(context.Background()) {
		t.Fatal("Prewarm dialled with an idle connection in the pool")
	}
	_, gen, err := collect(t, g, context.Background(), testRequest)
	if err != nil {
		t.Fatal(err)
	}
	if !gen.Conn.Reused || gen.Conn.Prewarmed {
		t.Fatalf("second call: %+v; want the kept-alive connection", gen.Conn)
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("the server saw %d connections; want 1", n)
	}
}

type words struct{}

func (words) Count(s string) int { return len(s) / 4 }

// Through the pipeline: llm_connect says the connection was prewarmed
// while retrieval ran, and no dial was on it — from the first ask on (the
// pool starts empty), and on every ask after (the server closed the last).
func TestPipelinePrewarmsTheModelConnection(t *testing.T) {
	t.Parallel()
	srv, _ := closingServer(t, true)
	g := pooledClient(t, srv)
	emb, err := retrieval.NewHashEmbedder(16)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := retrieval.OpenIndex(t.TempDir(), retrieval.IndexOptions{Dimension: 16, Embedder: emb.Name(), Writable: true, CompactAfter: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { idx.Close() })
	p, err := pipeline.New(pipeline.Config{Embedder: emb, Searcher: idx, Generator: g, Counter: words{}, Provider: "openai", Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		req := pipeline.Request{Question: "What is prefill?", TopK: pipeline.Unset, RerankTopN: pipeline.Unset, MaxTokens: pipeline.Unset}
		if err := req.Normalize(pipeline.DefaultMaxQuestion); err != nil {
			t.Fatal(err)
		}
		rec := p.Run(context.Background(), &req, pipeline.Discard{})
		if rec.Status != ragtime.StatusOK {
			t.Fatalf("ask %d: %s %s", i, rec.ErrorCode, rec.ErrorMessage)
		}
		var connect *ragtime.Span
		for j := range rec.Stages {
			if rec.Stages[j].Name == ragtime.StageLLMConnect {
				connect = &rec.Stages[j]
			}
		}
		if connect == nil {
			t.Fatalf("ask %d: no llm_connect stage", i)
		}
		if got, _ := connect.Attrs["prewarmed"].(bool); !got {
			t.Fatalf("ask %d: llm_connect attrs %v; want prewarmed", i, connect.Attrs)
		}
		if pre, _ := connect.Attrs["prewarm_connect_ms"].(float64); connect.Attrs["connect_ms"] != 0.0 || pre <= 0 {
			t.Fatalf("ask %d: llm_connect attrs %v; want no connect on the path, the prewarm's cost apart", i, connect.Attrs)
		}
		t.Logf("ask %d: llm_connect %.3f ms, attrs %v", i, connect.DurationMs, connect.Attrs)
	}
}
