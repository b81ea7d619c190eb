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

// AnthropicKeyEnv is where the anthropic provider also looks for its key.
const AnthropicKeyEnv = "ANTHROPIC_API_KEY"

// partsConfig selects the part behind each stage.
type partsConfig struct {
	configFile string
	dataDir    string
	embedder   string
	embedDim   int
	store      string
	reranker   string
	llm        llmConfig
	encoding   string
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
type remoteGenerator interface {
	pipeline.Generator
	ListModels(ctx context.Context) ([]string, error)
	Warmup(ctx context.Context, request bool) error
	CloseIdleConnections()
	Model() string
	BaseURL() string
}

// buildGenerator returns the configured generator; remote is nil for the
// extractive one.
func (c *llmConfig) buildGenerator(getenv func(string) string) (gen pipeline.Generator, remote remoteGenerator, model string, err error) {
	key, from := c.apiKey(getenv)
	cfg := llm.Config{
		BaseURL: c.baseURL, Model: c.model, APIKey: key, KeyEnv: from,
		Timeout: c.timeout, TTFTTimeout: c.ttftTimeout, MaxRetries: c.maxRetries, Getenv: getenv,
	}
	switch c.provider {
	case "extractive":
		return llm.NewExtractive(), nil, "extractive", nil
	case llm.ProviderOpenAI:
		g, err := llm.NewOpenAI(cfg)
		if err != nil {
			return nil, nil, "", err
		}
		return g, g, g.Model(), nil
	case llm.ProviderAnthropic:
		g, err := llm.NewAnthropic(cfg)
		if err != nil {
			return nil, nil, "", err
		}
		return g, g, g.Model(), nil
	case llm.ProviderOllama:
		g, err := llm.NewOllama(cfg)
		if err != nil {
			return nil, nil, "", err
		}
		return g, g, g.Model(), nil
	}
	return nil, nil, "", &usageError{msg: fmt.Sprintf("--llm-provider must be extractive, openai, anthropic or ollama, got %q", c.provider)}
}

// register adds every part's flags (serve).
func (c *partsConfig) register(fs *flag.FlagSet) {
	fs.StringVar(&c.configFile, "config", "", "JSON or TOML file with an llm section (provider, base_url, api_key_env, default_model, timeout_seconds, ttft_timeout_seconds, max_retries); flags and RAGTIME_* variables override it")
	c.registerIndex(fs)
	fs.StringVar(&c.encoding, "token-encoding", "o200k_base", "tiktoken encoding used to count prompt tokens (o200k_base, cl100k_base)")
	fs.StringVar(&c.reranker, "reranker", "bm25", "reranker: bm25 (lexical, over the search candidates) or none")
	c.llm.register(fs)
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
	remote       remoteGenerator // nil for the extractive generator
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
	p.generator, p.remote, p.model, err = c.llm.buildGenerator(env.getenv)
	if err != nil {
		return nil, err
	}
	p.provider = c.llm.provider
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
	if p.remote != nil {
		p.remote.CloseIdleConnections()
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
