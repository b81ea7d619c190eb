package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"ragtime/llm"
	"ragtime/llm/tokens"
	"ragtime/pipeline"
	"ragtime/postgres"
	"ragtime/rerank"
	"ragtime/retrieval"
)

// APIKeyEnv is the variable holding the LLM provider's key. The key is read
// from the environment only: never a flag, never a file, never logged.
const APIKeyEnv = "RAGTIME_LLM_API_KEY"

// partsConfig selects the part behind each stage.
type partsConfig struct {
	dataDir    string
	embedder   string
	embedDim   int
	store      string
	reranker   string
	provider   string
	baseURL    string
	model      string
	llmTimeout time.Duration
	encoding   string
}

// register adds every part's flags (serve).
func (c *partsConfig) register(fs *flag.FlagSet) {
	c.registerIndex(fs)
	fs.StringVar(&c.encoding, "token-encoding", "o200k_base", "tiktoken encoding used to count prompt tokens (o200k_base, cl100k_base)")
	fs.StringVar(&c.reranker, "reranker", "bm25", "reranker: bm25 (lexical, over the search candidates) or none")
	fs.StringVar(&c.provider, "llm-provider", "extractive", "generator: extractive (streams the best context sentences, no model) or openai (any OpenAI-compatible endpoint; key in "+APIKeyEnv+")")
	fs.StringVar(&c.baseURL, "llm-base-url", "", "OpenAI-compatible base URL; /chat/completions is appended (e.g. https://taotoken.net/api, https://api.openai.com/v1, http://127.0.0.1:11434/v1)")
	fs.StringVar(&c.model, "llm-model", "", "model name sent to the provider")
	fs.DurationVar(&c.llmTimeout, "llm-timeout", 5*time.Minute, "longest the LLM may stay silent: waiting for the response headers, or between two stream chunks")
}

// registerIndex adds the flags that choose the embedder and the store
// (ingest needs only these).
func (c *partsConfig) registerIndex(fs *flag.FlagSet) {
	fs.StringVar(&c.dataDir, "data-dir", "./data", "directory holding the embedded vector index")
	fs.StringVar(&c.embedder, "embedder", "hash", "query and chunk embedder: hash (lexical feature hashing of words and word pairs; no model, no semantics)")
	fs.IntVar(&c.embedDim, "embed-dimensions", 512, "vector dimension of the hash embedder")
	fs.StringVar(&c.store, "store", "embedded", "vector store: embedded (in-process, persisted under --data-dir)")
}

// parts are the built stage implementations.
type parts struct {
	embedder     pipeline.Embedder
	embedderName string
	index        *retrieval.Index
	storeName    string
	reranker     pipeline.Reranker
	rerankerName string
	generator    pipeline.Generator
	provider     string
	model        string
	counter      pipeline.TokenCounter
}

// buildEmbedder returns the configured embedder and its dimension.
func (c *partsConfig) buildEmbedder() (*retrieval.HashEmbedder, error) {
	switch c.embedder {
	case "hash":
		e, err := retrieval.NewHashEmbedder(c.embedDim)
		if err != nil {
			return nil, fmt.Errorf("--embed-dimensions: %w", err)
		}
		return e, nil
	default:
		return nil, &usageError{msg: fmt.Sprintf("--embedder must be hash, got %q", c.embedder)}
	}
}

// openIndex opens the embedded index for the configured embedder.
func (c *partsConfig) openIndex(emb *retrieval.HashEmbedder, writable bool) (*retrieval.Index, error) {
	if c.store != "embedded" {
		return nil, &usageError{msg: fmt.Sprintf("--store must be embedded, got %q", c.store)}
	}
	ix, err := retrieval.OpenIndex(c.dataDir, retrieval.IndexOptions{
		Dimension: emb.Dimension(), Embedder: emb.Name(), Writable: writable,
	})
	if err != nil {
		return nil, fmt.Errorf("opening the index under --data-dir %s: %w", c.dataDir, err)
	}
	return ix, nil
}

// build makes every part for serving; env supplies the API key.
func (c *partsConfig) build(env *environment, writable bool) (*parts, error) {
	emb, err := c.buildEmbedder()
	if err != nil {
		return nil, err
	}
	p := &parts{embedder: emb, embedderName: emb.Name(), storeName: c.store}
	switch c.reranker {
	case "bm25":
		p.reranker, p.rerankerName = rerank.NewBM25(), "bm25"
	case "none":
		p.rerankerName = "none"
	default:
		return nil, &usageError{msg: fmt.Sprintf("--reranker must be bm25 or none, got %q", c.reranker)}
	}
	counter, err := tokens.New(c.encoding)
	if err != nil {
		return nil, fmt.Errorf("--token-encoding: %w", err)
	}
	p.counter = counter
	switch c.provider {
	case "extractive":
		p.generator, p.provider, p.model = llm.NewExtractive(), "extractive", "extractive"
	case "openai":
		g, err := llm.NewOpenAI(llm.OpenAIConfig{
			BaseURL: c.baseURL, Model: c.model, APIKey: env.getenv(APIKeyEnv), Timeout: c.llmTimeout,
		})
		if err != nil {
			return nil, err
		}
		p.generator, p.provider, p.model = g, "openai", c.model
	default:
		return nil, &usageError{msg: fmt.Sprintf("--llm-provider must be extractive or openai, got %q", c.provider)}
	}
	p.index, err = c.openIndex(emb, writable)
	if err != nil {
		return nil, err
	}
	return p, nil
}

// ready reports whether the index is loaded.
func (p *parts) ready() error {
	if p.index == nil {
		return fmt.Errorf("the index is not loaded")
	}
	return nil
}

// watch reloads the index every interval when another process saved a newer
// one; the returned func stops it.
func (p *parts) watch(ctx context.Context, every time.Duration, log *slog.Logger) func() {
	if every <= 0 {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				changed, err := p.index.Reload()
				if err != nil {
					log.Warn("reloading the index", "err", err)
				} else if changed {
					log.Info("index reloaded", "chunks", p.index.Len())
				}
			}
		}
	}()
	return func() { cancel(); <-done }
}

// Close releases the index and the generator's idle connections.
func (p *parts) Close() error {
	if g, ok := p.generator.(interface{ CloseIdleConnections() }); ok {
		g.CloseIdleConnections()
	}
	if p.index != nil {
		return p.index.Close()
	}
	return nil
}

// dbConfig holds the database flag.
type dbConfig struct {
	url string
}

// DefaultDatabaseURL is used when neither --database-url nor DATABASE_URL is set.
const DefaultDatabaseURL = "postgres://postgres@127.0.0.1:5432/ragtime?sslmode=disable"

func (c *dbConfig) register(fs *flag.FlagSet) {
	fs.StringVar(&c.url, "database-url", DefaultDatabaseURL, "PostgreSQL URL (also DATABASE_URL)")
}

// open creates the database when missing, connects, and migrates when asked.
func (c *dbConfig) open(ctx context.Context, migrate bool) (*pgxpool.Pool, error) {
	if err := postgres.EnsureDatabase(ctx, c.url); err != nil {
		return nil, err
	}
	pool, err := postgres.Open(ctx, c.url)
	if err != nil {
		return nil, err
	}
	if migrate {
		if err := postgres.Migrate(ctx, pool); err != nil {
			pool.Close()
			return nil, err
		}
	}
	return pool, nil
}
