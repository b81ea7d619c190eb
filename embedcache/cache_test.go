package embedcache

import (
	"context"
	"encoding/json"
	"hash/fnv"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"ragtime/internal/upstream"
	"ragtime/pipeline"
	"ragtime/retrieval/openai"
)

// embeddings is a real OpenAI-compatible /v1/embeddings server that
// counts the texts it was asked to embed.
type embeddings struct {
	mu    sync.Mutex
	calls int
	texts []string
}

func (s *embeddings) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Input []string `json:"input"`
		Model string   `json:"model"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	s.calls++
	s.texts = append(s.texts, req.Input...)
	s.mu.Unlock()
	type item struct {
		Index     int       `json:"index"`
		Embedding []float32 `json:"embedding"`
	}
	data := make([]item, len(req.Input))
	for i, text := range req.Input {
		h := fnv.New32a()
		h.Write([]byte(text))
		x := h.Sum32()
		data[i] = item{i, []float32{float32(x & 0xff), float32(x >> 8 & 0xff), float32(x >> 16 & 0xff), float32(len(text))}}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": data, "model": req.Model})
}

func (s *embeddings) count() (calls int, texts []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls, slices.Clone(s.texts)
}

func newCache(t *testing.T, size int, ttl time.Duration) (*Cache, *embeddings) {
	t.Helper()
	srv := &embeddings{}
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	pool := upstream.NewPool(upstream.Options{})
	e, err := openai.New(openai.Config{BaseURL: ts.URL + "/v1", Model: "m", Dimensions: 4, Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(e, Config{Embedder: e.Name(), Model: "m", Dimension: 4, Size: size, TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	return c, srv
}

func embedOne(t *testing.T, c *Cache, text string) ([]float32, pipeline.Call) {
	t.Helper()
	var call pipeline.Call
	vecs, err := c.Embed(pipeline.WithCall(context.Background(), &call), []string{text})
	if err != nil {
		t.Fatalf("embed %q: %v", text, err)
	}
	if len(vecs) != 1 || len(vecs[0]) != 4 {
		t.Fatalf("embed %q: %v", text, vecs)
	}
	return vecs[0], call
}

// A repeated question, spaced differently, is answered from the cache: the
// server is asked once, and the stage is told hit after miss.
func TestRepeatedQuestionHits(t *testing.T) {
	c, srv := newCache(t, 16, time.Hour)
	first, call := embedOne(t, c, "What is a  prefix cache?")
	if call.Cache != pipeline.CacheMiss || !call.Made {
		t.Fatalf("first ask: cache %q, made %v; want miss and a call", call.Cache, call.Made)
	}
	first[0] = -1 // the caller's copy: the cache must not see it
	again, call := embedOne(t, c, "\tWhat is a prefix cache? ")
	if call.Cache != pipeline.CacheHit || call.Made {
		t.Fatalf("repeat: cache %q, made %v; want hit and no call", call.Cache, call.Made)
	}
	calls, texts := srv.count()
	if calls != 1 || !slices.Equal(texts, []string{"What is a prefix cache?"}) {
		t.Fatalf("server asked %d times for %q; want once, for the normalised text", calls, texts)
	}
	if again[0] == -1 || again[3] != float32(len("What is a prefix cache?")) {
		t.Fatalf("cached vector %v is not the server's", again)
	}
	if s := c.Stats(); s.Hits != 1 || s.Misses != 1 || s.Entries != 1 {
		t.Fatalf("stats %+v; want 1 hit, 1 miss, 1 entry", s)
	}
	// A batch with one known text sends only the other.
	vecs, err := c.Embed(context.Background(), []string{"new text", "What is a prefix cache?"})
	if err != nil || len(vecs) != 2 || vecs[1][3] != again[3] || vecs[0][3] != float32(len("new text")) {
		t.Fatalf("mixed batch: %v, %v", vecs, err)
	}
	if _, texts := srv.count(); texts[len(texts)-1] != "new text" || len(texts) != 2 {
		t.Fatalf("mixed batch sent %q; want only the new text", texts)
	}
}

// The cache holds at most Size vectors: the least recently used goes.
func TestBoundedBySize(t *testing.T) {
	c, srv := newCache(t, 3, time.Hour)
	for i := range 10 {
		embedOne(t, c, strings.Repeat("q", i+1))
	}
	if n := c.Stats().Entries; n != 3 {
		t.Fatalf("%d entries after 10 texts; want the size, 3", n)
	}
	embedOne(t, c, "qqqqqqqqqq") // the latest: still there
	if calls, _ := srv.count(); calls != 10 {
		t.Fatalf("%d calls; the latest text should have hit", calls)
	}
	if _, call := embedOne(t, c, "q"); call.Cache != pipeline.CacheMiss { // the first: evicted
		t.Fatalf("the oldest text: %q; want miss", call.Cache)
	}
}

// An entry expires after the TTL.
func TestExpiresAfterTTL(t *testing.T) {
	c, srv := newCache(t, 8, 50*time.Millisecond)
	embedOne(t, c, "q")
	time.Sleep(200 * time.Millisecond)
	if _, call := embedOne(t, c, "q"); call.Cache != pipeline.CacheMiss {
		t.Fatalf("after the TTL: %q; want miss", call.Cache)
	}
	if calls, _ := srv.count(); calls != 2 {
		t.Fatalf("%d calls; want 2", calls)
	}
}

func TestConfigErrorsNameTheFlag(t *testing.T) {
	c, _ := newCache(t, 1, time.Second)
	for cfg, want := range map[Config]string{
		{Size: 0, TTL: time.Second}: "--embed-cache-size",
		{Size: 1, TTL: 0}:           "--embed-cache-ttl",
	} {
		if _, err := New(c, cfg); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("New(%+v) = %v; want an error naming %s", cfg, err, want)
		}
	}
}

// Two spaces (embedders, models or dimensions) never share a key.
func TestKeysSeparateSpaces(t *testing.T) {
	inner, _ := newCache(t, 1, time.Second)
	keyOf := func(cfg Config) [32]byte {
		cfg.Size, cfg.TTL = 1, time.Second
		c, err := New(inner, cfg)
		if err != nil {
			t.Fatal(err)
		}
		return c.key("q")
	}
	base := Config{Embedder: "openai:m", Model: "m", Dimension: 4}
	seen := map[[32]byte]Config{keyOf(base): base}
	for _, cfg := range []Config{{Embedder: "ollama:m", Model: "m", Dimension: 4}, {Embedder: "openai:m", Model: "m2", Dimension: 4},
		{Embedder: "openai:m", Model: "m", Dimension: 8}, {Embedder: "openai:", Model: "mm", Dimension: 4}} {
		k := keyOf(cfg)
		if other, ok := seen[k]; ok {
			t.Errorf("%+v and %+v key the same text alike", cfg, other)
		}
		seen[k] = cfg
	}
}
