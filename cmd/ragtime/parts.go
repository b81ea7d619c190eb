package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"ragtime"
	"ragtime/internal/upstream"
	"ragtime/lexical"
	"ragtime/llm"
	"ragtime/llm/tokens"
	"ragtime/pipeline"
	"ragtime/postgres"
	"ragtime/rerank"
	"ragtime/retrieval"
	"ragtime/retrieval/ollama"
	"ragtime/retrieval/openai"
	"ragtime/retrieval/qdrant"
)

// APIKeyEnv is the variable holding the LLM provider's key. The key is read
// from the environment only: never a flag, never a file, never logged.
const APIKeyEnv = "RAGTIME_LLM_API_KEY"

// AnthropicKeyEnv is where the anthropic provider also looks for its key.
const AnthropicKeyEnv = "ANTHROPIC_API_KEY"

// Variables holding the keys of the remote parts, by default. Keys are read
// from the environment only: never a flag value, never a file, never logged.
const (
	EmbedKeyEnvDefault  = "RAGTIME_EMBED_API_KEY"
	RerankKeyEnvDefault = "RAGTIME_RERANK_API_KEY"
	QdrantKeyEnvDefault = "RAGTIME_QDRANT_API_KEY"
)

// partsConfig selects the part behind each stage.
type partsConfig struct {
	// logger receives the embedded index's log lines (replay, compaction);
	// nil discards them.
	logger     *slog.Logger
	dataDir    string
	embedder   string
	embedDim   int
	embedURL   string
	embedModel string
	embedKey   string
	embedBatch int
	embedTime  time.Duration
	embedWait  time.Duration

	store       string
	storeExact  bool
	indexEf     int
	indexGraph  int
	qdrantURL   string
	qdrantKey   string
	qdrantColl  string
	qdrantTLS   bool
	qdrantM     int
	qdrantEfC   int
	qdrantEf    int
	qdrantInt8  bool
	qdrantScore float64
	qdrant      qdrant.Cluster

	reranker    string
	rerankURL   string
	rerankAPI   string
	rerankModel string
	rerankKey   string

	configFile string
	llm        llmConfig
	encoding   string

	// lockedReadOnly opens the embedded index read-only when another
	// process holds its writer lock, instead of failing (serve).
	lockedReadOnly bool
	// pool holds the upstream keep-alive transports of every HTTP part
	// (serve sizes it to --max-concurrent); nil means upstream.Default().
	pool *upstream.Pool
}

// llmConfig is the generator's configuration: flags, RAGTIME_* variables
// and the --config file's llm section.
type llmConfig struct {
	provider    string
	baseURL     string
	model       string
	keyEnv      string
	timeout     time.Duration
	ttftTimeout time.Duration
	maxRetries  int
	// pool: see partsConfig.pool.
	pool *upstream.Pool
}

func (c *llmConfig) register(fs *flag.FlagSet) {
	fs.StringVar(&c.provider, "llm-provider", "extractive", "generator: extractive (streams the best context sentences, no model), openai (any OpenAI-compatible endpoint: OpenAI, TaoToken, DeepSeek, vLLM, llama.cpp, Ollama /v1, llmsim), anthropic (Messages API) or ollama (native /api/chat, with server timings)")
	fs.StringVar(&c.baseURL, "llm-base-url", "", "provider base URL; the chat path is appended (openai: e.g. https://taotoken.net/api, https://api.openai.com/v1, http://127.0.0.1:8000/v1; anthropic: default "+llm.AnthropicBaseURL+"; ollama: default "+llm.OllamaBaseURL+")")
	fs.StringVar(&c.model, "llm-model", "", "model name sent to the provider")
	fs.StringVar(&c.keyEnv, "llm-api-key-env", APIKeyEnv, "NAME of the environment variable holding the provider's API key (the key is never a flag or a file value); anthropic also falls back to "+AnthropicKeyEnv)
	fs.DurationVar(&c.timeout, "llm-timeout", 5*time.Minute, "longest a whole generation may take, retries included (0: no limit)")
	fs.DurationVar(&c.ttftTimeout, "llm-ttft-timeout", time.Minute, "longest wait for the model's first token, per attempt (0: no limit)")
	fs.IntVar(&c.maxRetries, "llm-max-retries", 2, "retries of a call that failed before its first token (429, 5xx, no connection), with jittered exponential backoff; never after a token was sent")
}

// apiKey returns the key and the variable it came from ("" when unset).
func (c *llmConfig) apiKey(getenv func(string) string) (key, from string) {
	if v := getenv(c.keyEnv); v != "" {
		return v, c.keyEnv
	}
	if c.provider == llm.ProviderAnthropic && c.keyEnv == APIKeyEnv {
		if v := getenv(AnthropicKeyEnv); v != "" {
			return v, AnthropicKeyEnv
		}
	}
	return "", c.keyEnv
}

// remoteGenerator is what doctor, ttft and serve's warm-up need of an HTTP
// generator beyond pipeline.Generator.
type remoteGenerator = llm.Remote

// buildGenerator returns the configured generator; remote is nil for the
// extractive one.
func (c *llmConfig) buildGenerator(getenv func(string) string) (gen pipeline.Generator, remote remoteGenerator, model string, err error) {
	if c.provider == "extractive" {
		return llm.NewExtractive(), nil, "extractive", nil
	}
	switch c.provider {
	case llm.ProviderOpenAI, llm.ProviderAnthropic, llm.ProviderOllama:
	default:
		return nil, nil, "", &usageError{msg: fmt.Sprintf("--llm-provider must be extractive, openai, anthropic or ollama, got %q", c.provider)}
	}
	key, from := c.apiKey(getenv)
	g, err := llm.New(c.provider, llm.Config{
		BaseURL: c.baseURL, Model: c.model, APIKey: key, KeyEnv: from,
		Timeout: c.timeout, TTFTTimeout: c.ttftTimeout, MaxRetries: c.maxRetries, Getenv: getenv, Pool: c.pool,
	})
	if err != nil {
		return nil, nil, "", err
	}
	return g, g, g.Model(), nil
}

// register adds every part's flags (serve).
func (c *partsConfig) register(fs *flag.FlagSet) {
	fs.StringVar(&c.configFile, "config", "", "JSON or TOML file with an llm section (provider, base_url, api_key_env, default_model, timeout_seconds, ttft_timeout_seconds, max_retries); flags and RAGTIME_* variables override it")
	c.registerIndex(fs)
	fs.StringVar(&c.encoding, "token-encoding", "o200k_base", "tiktoken encoding used to count prompt tokens (o200k_base, cl100k_base)")
	fs.StringVar(&c.reranker, "reranker", "bm25", "reranker: bm25 (lexical, over the search candidates), http (a cross-encoder server, see --rerank-url) or none")
	fs.StringVar(&c.rerankURL, "rerank-url", "", "rerank server root (or full endpoint ending in /rerank)")
	fs.StringVar(&c.rerankAPI, "rerank-api", rerank.ShapeTEI, "rerank request shape: tei (POST /rerank {query, texts}) or cohere (POST /v1/rerank {model, query, documents, top_n}; also Jina)")
	fs.StringVar(&c.rerankModel, "rerank-model", "", "rerank model (cohere shape)")
	fs.StringVar(&c.rerankKey, "rerank-api-key-env", RerankKeyEnvDefault, "NAME of the environment variable holding the rerank API key")
	c.llm.register(fs)
}

// registerIndex adds the flags that choose the embedder and the store
// (ingest needs only these).
func (c *partsConfig) registerIndex(fs *flag.FlagSet) {
	fs.StringVar(&c.dataDir, "data-dir", "./data", "directory holding the embedded vector index")
	fs.StringVar(&c.embedder, "embedder", "hash", "query and chunk embedder: hash (lexical feature hashing of words and word pairs; no model, no semantics), openai (any OpenAI-compatible /embeddings) or ollama (/api/embed)")
	fs.IntVar(&c.embedDim, "embed-dimensions", 0, "`n`: the vector dimension: for hash the bucket count (0: the one the embedded index under --data-dir records, else 512); for openai sent as the request's dimensions (0: the model's own, learnt by one request at start); a value other than the embedded index's is an error naming both")
	fs.StringVar(&c.embedURL, "embed-base-url", "", "embedding server: OpenAI-compatible base URL with /v1 (e.g. https://api.openai.com/v1), or Ollama's root (default http://127.0.0.1:11434)")
	fs.StringVar(&c.embedModel, "embed-model", "", "embedding model (e.g. text-embedding-3-small, nomic-embed-text)")
	fs.StringVar(&c.embedKey, "embed-api-key-env", EmbedKeyEnvDefault, "NAME of the environment variable holding the embedding API key")
	fs.IntVar(&c.embedBatch, "embed-batch-size", 64, "texts per embedding request (openai, ollama)")
	fs.DurationVar(&c.embedTime, "embed-timeout", time.Minute, "longest one embedding request may take")
	fs.DurationVar(&c.embedWait, "embed-wait", time.Minute, "how long to wait at start for an unreachable or unavailable embedding server (openai, ollama) to answer the request that learns the embedding dimension, as when compose starts it with ragtime; 0: fail at once")

	fs.StringVar(&c.store, "store", "embedded", "vector store: embedded (in-process HNSW index persisted under --data-dir) or qdrant (gRPC, see --qdrant-url)")
	fs.BoolVar(&c.storeExact, "store-exact", false, "embedded store: scan every vector (exact) instead of searching the HNSW graph")
	fs.IntVar(&c.indexEf, "index-ef", retrieval.DefaultEf, "embedded store: HNSW search candidate list length (higher: slower, closer to exact)")
	fs.IntVar(&c.indexGraph, "index-graph-mb", retrieval.DefaultGraphFromMB, "embedded store: megabytes of vectors (chunks × dimensions × 4 bytes) from which the index builds its HNSW graph, in the background; below them every search scans every vector, exactly, as under Qdrant's indexing_threshold (0: a graph from the first chunk)")
	fs.StringVar(&c.qdrantURL, "qdrant-url", "127.0.0.1:6334", "Qdrant gRPC address, host:port")
	fs.StringVar(&c.qdrantKey, "qdrant-api-key-env", QdrantKeyEnvDefault, "NAME of the environment variable holding the Qdrant API key")
	fs.StringVar(&c.qdrantColl, "qdrant-collection", "ragtime", "Qdrant collection (created by the first write when missing)")
	fs.BoolVar(&c.qdrantTLS, "qdrant-tls", false, "connect to Qdrant over TLS")
	fs.IntVar(&c.qdrantM, "qdrant-hnsw-m", 0, "HNSW m of a new Qdrant collection (0: Qdrant's default, 16)")
	fs.IntVar(&c.qdrantEfC, "qdrant-hnsw-ef-construct", 0, "HNSW ef_construct of a new Qdrant collection (0: Qdrant's default, 100)")
	fs.IntVar(&c.qdrantEf, "qdrant-hnsw-ef", 0, "HNSW ef of each Qdrant search (0: Qdrant's default)")
	fs.BoolVar(&c.qdrantInt8, "qdrant-int8", false, "int8 scalar quantization for a new Qdrant collection")
	fs.Float64Var(&c.qdrantScore, "qdrant-score-threshold", 0, "drop Qdrant hits with a cosine score below this (0: keep all)")
	fs.IntVar(&c.qdrant.ShardNumber, "qdrant-shards", 0, "shard_number of a new Qdrant collection (per tenant with --qdrant-tenant-key; 0: Qdrant's default, 1); fixed once created, so a different existing collection is an error (qdrant.shard_number in --config)")
	fs.IntVar(&c.qdrant.ReplicationFactor, "qdrant-replication-factor", 0, "replication_factor of a new Qdrant collection: copies of each shard (0: Qdrant's default, 1); a different existing collection is a warning (qdrant.replication_factor in --config)")
	fs.IntVar(&c.qdrant.WriteConsistencyFactor, "qdrant-write-consistency-factor", 0, "write_consistency_factor of a new Qdrant collection: replicas that acknowledge each write (0: Qdrant's default, 1; at most --qdrant-replication-factor) (qdrant.write_consistency_factor in --config)")
	fs.BoolVar(&c.qdrant.OnDiskVectors, "qdrant-on-disk-vectors", false, "keep a new Qdrant collection's vectors on disk (memory-mapped) instead of in RAM (qdrant.on_disk_vectors in --config)")
	fs.BoolVar(&c.qdrant.OnDiskPayload, "qdrant-on-disk-payload", false, "keep a new Qdrant collection's payloads (chunk text, metadata) on disk (qdrant.on_disk_payload in --config)")
	fs.StringVar(&c.qdrant.ReadConsistency, "qdrant-read-consistency", "", "read_consistency of every Qdrant search and read: all, majority, quorum or a number of replicas (empty: Qdrant's default, one replica) (qdrant.read_consistency in --config)")
	fs.StringVar(&c.qdrant.TenantKey, "qdrant-tenant-key", "", "shard a new Qdrant collection by tenant (custom sharding): the document metadata key naming its tenant, e.g. tenant; a search whose filter (an API key's --filter) fixes it reads that tenant's shards only; documents without it go to shard key \"shared\" (qdrant.tenant_key in --config)")
}

// store is a vector store behind the search stage that documents can be
// written to, as serve and ingest use it; both the embedded index
// (*retrieval.Index) and Qdrant (*qdrant.Store) implement it.
type store interface {
	pipeline.Searcher
	retrieval.Store
	DeleteDocument(ctx context.Context, docID string) (bool, error)
	ListDocuments(ctx context.Context) ([]ragtime.DocumentInfo, error)
	// SearchAttrs are added to every search stage's attrs.
	SearchAttrs() map[string]any
	// Ready reports whether the store can be searched (/readyz).
	Ready(ctx context.Context) error
	// Len is the chunk count, -1 when the store does not know it.
	Len() int
	// Describe says where the store is and what it holds.
	Describe() string
	// Watch picks up what another process writes, every interval.
	Watch(ctx context.Context, every time.Duration, log *slog.Logger) (stop func())
	Close() error
}

var (
	_ store = (*retrieval.Index)(nil)
	_ store = (*qdrant.Store)(nil)
)

// parts are the built stage implementations.
type parts struct {
	embedder     pipeline.Embedder
	embedderName string
	embedDim     int
	store        store
	storeName    string
	reranker     pipeline.Reranker
	rerankerName string
	readOnly     bool // the embedded index was opened without the writer lock
	generator    pipeline.Generator
	remote       remoteGenerator // nil for the extractive generator
	provider     string
	model        string
	counter      pipeline.TokenCounter
}

// embedderInfo is a built embedder with the name stores record and its
// vector dimension.
type embedderInfo struct {
	pipeline.Embedder
	name string
	dim  int
}

// buildEmbedder returns the configured embedder. For a remote embedder
// whose dimension is not configured it embeds one text to learn it.
func (c *partsConfig) buildEmbedder(ctx context.Context, env *environment) (*embedderInfo, error) {
	if c.embedDim < 0 {
		return nil, &usageError{msg: fmt.Sprintf("--embed-dimensions must not be negative, got %d", c.embedDim)}
	}
	if c.embedBatch < 1 {
		return nil, &usageError{msg: fmt.Sprintf("--embed-batch-size must be at least 1, got %d", c.embedBatch)}
	}
	stored, err := c.storedDimension()
	if err != nil {
		return nil, err
	}
	var emb pipeline.Embedder
	var name string
	switch c.embedder {
	case "hash":
		e, err := retrieval.NewHashEmbedder(cmpOr(c.embedDim, cmpOr(stored, 512)))
		if err != nil {
			return nil, fmt.Errorf("--embed-dimensions: %w", err)
		}
		return &embedderInfo{Embedder: e, name: e.Name(), dim: e.Dimension()}, nil
	case "openai":
		e, err := openai.New(openai.Config{
			BaseURL: c.embedURL, Model: c.embedModel, Dimensions: c.embedDim,
			APIKey: env.getenv(c.embedKey), KeyVar: c.embedKey, BatchSize: c.embedBatch, Timeout: c.embedTime, Pool: c.pool,
		})
		if err != nil {
			return nil, &usageError{msg: err.Error()}
		}
		emb, name = e, e.Name()
	case "ollama":
		e, err := ollama.New(ollama.Config{
			BaseURL: c.embedURL, Model: c.embedModel, Dimensions: c.embedDim, BatchSize: c.embedBatch, Timeout: c.embedTime,
			APIKey: env.getenv(c.embedKey), KeyVar: c.embedKey, Pool: c.pool,
		})
		if err != nil {
			return nil, &usageError{msg: err.Error()}
		}
		emb, name = e, e.Name()
	default:
		return nil, &usageError{msg: fmt.Sprintf("--embedder must be hash, openai or ollama, got %q", c.embedder)}
	}
	dim := c.embedDim
	if dim == 0 {
		vecs, err := c.probeEmbedder(ctx, emb)
		if err != nil {
			return nil, fmt.Errorf("learning the embedding dimension (set --embed-dimensions to skip this): %w", err)
		}
		dim = len(vecs[0])
	}
	return &embedderInfo{Embedder: emb, name: name, dim: dim}, nil
}

// storedDimension returns the vector dimension the embedded index under
// --data-dir records, 0 when there is no index yet (or the store is not the
// embedded one). The hash embedder takes it when --embed-dimensions is not
// given; a remote embedder's dimension is learnt from the server and the
// index refuses a different one when it opens. A --embed-dimensions that
// differs from the index's is an error naming both.
func (c *partsConfig) storedDimension() (int, error) {
	if c.store != "embedded" {
		return 0, nil
	}
	_, dim, err := retrieval.StoredEmbedder(c.dataDir)
	if err != nil {
		// No index yet, or one whose header cannot be read: opening it
		// says what is wrong (and recovers what it can), as before.
		return 0, nil
	}
	if c.embedDim != 0 && c.embedDim != dim {
		return 0, &usageError{msg: fmt.Sprintf("--embed-dimensions %d conflicts with the index under --data-dir %s, which holds %d-dimensional vectors: "+
			"leave --embed-dimensions out (the index's %d is used) or ingest into a fresh --data-dir", c.embedDim, c.dataDir, dim, dim)}
	}
	return dim, nil
}

// Backoff of probeEmbedder's retries.
const (
	embedWaitFirst = 250 * time.Millisecond
	embedWaitMax   = 2 * time.Second
)

// probeEmbedder embeds one text to learn the dimension, trying again for
// up to --embed-wait while the embedding server is unreachable or says it
// is unavailable (it may be starting next to ragtime), and saying so in
// the log once. Other failures (a wrong key or model) are returned at once.
func (c *partsConfig) probeEmbedder(ctx context.Context, emb pipeline.Embedder) ([][]float32, error) {
	deadline := time.Now().Add(c.embedWait)
	wait := embedWaitFirst
	for said := false; ; said = true {
		vecs, err := emb.Embed(ctx, []string{"dimension probe"})
		var pe *ragtime.Error
		left := time.Until(deadline)
		if err == nil || !errors.As(err, &pe) || pe.Kind != ragtime.KindUpstream || left <= 0 {
			if err != nil && said {
				err = fmt.Errorf("waited %s (--embed-wait): %w", c.embedWait, err)
			}
			return vecs, err
		}
		if !said {
			log := c.logger
			if log == nil {
				log = slog.Default()
			}
			log.Warn("waiting for the embedding server to answer, to learn the embedding dimension (--embed-dimensions skips this)",
				"embed_base_url", upstream.RedactURL(c.embedURL), "up_to", c.embedWait.String(), "err", pe.Message)
		}
		// The last try is at the deadline, so serve waits the whole
		// --embed-wait, not up to one backoff less.
		t := time.NewTimer(min(wait, left))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
		wait = min(wait*2, embedWaitMax)
	}
}

func cmpOr(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

// openStore opens the configured vector store for the embedder; writable
// takes the embedded index's writer lock (Qdrant needs none).
func (c *partsConfig) openStore(ctx context.Context, env *environment, emb *embedderInfo, writable bool) (*parts, error) {
	p := &parts{embedder: emb.Embedder, embedderName: emb.name, embedDim: emb.dim, storeName: c.store}
	switch c.store {
	case "embedded":
		if c.indexEf < 1 {
			return nil, &usageError{msg: fmt.Sprintf("--index-ef must be at least 1, got %d", c.indexEf)}
		}
		if c.indexGraph < 0 {
			return nil, &usageError{msg: fmt.Sprintf("--index-graph-mb must not be negative, got %d", c.indexGraph)}
		}
		opts := retrieval.IndexOptions{
			Dimension: emb.dim, Embedder: emb.name, Writable: writable, Exact: c.storeExact, Ef: c.indexEf,
			GraphFrom: int64(c.indexGraph) << 20, Logger: c.logger,
		}
		ix, err := retrieval.OpenIndex(c.dataDir, opts)
		if err != nil && errors.Is(err, retrieval.ErrLocked) && c.lockedReadOnly {
			// Another process writes (an ingest, another serve): search
			// what it saves, read-only.
			opts.Writable = false
			ix, err = retrieval.OpenIndex(c.dataDir, opts)
			p.readOnly = true
		}
		if err != nil {
			if errors.Is(err, retrieval.ErrLocked) {
				return nil, fmt.Errorf("opening the index under --data-dir %s: %w\n"+
					"another ragtime writes to it: if a `ragtime serve`, add files through its API (POST /v1/documents, see docs/api.md) "+
					"or restart it with --read-only so `ragtime ingest` can write; if a `ragtime ingest`, wait for it to finish", c.dataDir, err)
			}
			return nil, fmt.Errorf("opening the index under --data-dir %s: %w", c.dataDir, err)
		}
		p.store = ix
	case "qdrant":
		qs, err := qdrant.Open(ctx, qdrant.Config{
			Addr: c.qdrantURL, APIKey: env.getenv(c.qdrantKey), TLS: c.qdrantTLS, Collection: c.qdrantColl,
			Dimension: emb.dim, Embedder: emb.name,
			HNSWM: c.qdrantM, HNSWEfConstruct: c.qdrantEfC, HNSWEf: c.qdrantEf, Int8: c.qdrantInt8,
			ScoreThreshold: c.qdrantScore, // the collection is created by the first write
			Cluster:        c.qdrant, Logger: c.logger,
		})
		if err != nil {
			return nil, err
		}
		p.store = qs
	default:
		return nil, &usageError{msg: fmt.Sprintf("--store must be embedded or qdrant, got %q", c.store)}
	}
	return p, nil
}

// build makes every part for serving; env supplies the API keys.
func (c *partsConfig) build(ctx context.Context, env *environment, writable bool) (*parts, error) {
	var rr pipeline.Reranker
	var rrName string
	switch c.reranker {
	case "bm25":
		rrName = "bm25" // made with the store's corpus statistics, below
	case "none":
		rrName = "none"
	case "http":
		h, err := rerank.NewHTTP(rerank.HTTPConfig{
			URL: c.rerankURL, Shape: c.rerankAPI, Model: c.rerankModel,
			APIKey: env.getenv(c.rerankKey), KeyVar: c.rerankKey, Pool: c.pool,
		})
		if err != nil {
			return nil, &usageError{msg: err.Error()}
		}
		rr, rrName = h, h.Name()
	default:
		return nil, &usageError{msg: fmt.Sprintf("--reranker must be bm25, http or none, got %q", c.reranker)}
	}
	counter, err := tokens.New(c.encoding)
	if err != nil {
		return nil, fmt.Errorf("--token-encoding: %w", err)
	}
	c.llm.pool = c.pool
	gen, remote, model, err := c.llm.buildGenerator(env.getenv)
	if err != nil {
		return nil, err
	}
	emb, err := c.buildEmbedder(ctx, env)
	if err != nil {
		return nil, err
	}
	p, err := c.openStore(ctx, env, emb, writable)
	if err != nil {
		return nil, err
	}
	if c.reranker == "bm25" {
		switch st := p.store.(type) {
		case lexical.Stats: // the embedded store's lexical index
			rr = rerank.NewBM25(st)
		case rerank.CorpusScorer: // a Qdrant collection's lexical leg
			rr = rerank.NewBM25Remote(st)
		default:
			rr = rerank.NewBM25(nil)
		}
	}
	p.reranker, p.rerankerName = rr, rrName
	p.counter = counter
	p.generator, p.remote, p.model, p.provider = gen, remote, model, c.llm.provider
	return p, nil
}

// Close releases the store and the generator's idle connections.
func (p *parts) Close() error {
	if p.remote != nil {
		p.remote.CloseIdleConnections()
	}
	return p.store.Close()
}

// dbConfig holds the database flag.
type dbConfig struct {
	url string
}

func (c *dbConfig) register(fs *flag.FlagSet) {
	fs.StringVar(&c.url, "database-url", postgres.DefaultDatabaseURL, "PostgreSQL URL (also DATABASE_URL)")
}

// open readies the database (postgres.Setup), naming the flag to fix when
// its URL is not one.
func (c *dbConfig) open(ctx context.Context, migrate bool) (*pgxpool.Pool, error) {
	pool, err := postgres.Setup(ctx, c.url, migrate)
	if errors.Is(err, postgres.ErrInvalidURL) {
		// pgx's message names neither the flag nor the variable to fix.
		return nil, &usageError{msg: fmt.Sprintf("--database-url (or DATABASE_URL) must be a PostgreSQL URL such as %s (%v)", postgres.DefaultDatabaseURL, err)}
	}
	return pool, err
}
