package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/pprof"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"ragtime"
	"ragtime/admission"
	"ragtime/api"
	"ragtime/auth"
	"ragtime/internal/shell"
	"ragtime/internal/spool"
	"ragtime/internal/upstream"
	"ragtime/llm"
	"ragtime/pipeline"
	"ragtime/postgres"
	"ragtime/redisstate"
	"ragtime/retrieval"
	"ragtime/tracing"
)

// serveConfig holds serve's flags.
type serveConfig struct {
	addr             string
	parts            partsConfig
	db               dbConfig
	corsOrigins      listFlag
	allowedHosts     listFlag
	storeQuestion    bool
	maxQuestionChars int
	maxConcurrent    int
	callerConcurrent int
	queueTimeout     time.Duration
	rate             auth.Rate
	bodyTimeout      time.Duration
	idleTimeout      time.Duration
	writeTimeout     time.Duration
	heartbeat        time.Duration
	sseRetry         time.Duration
	maxContextTokens int
	embedCache       embedCacheConfig
	budget           budgetConfig
	topK             int
	rerankTopN       int
	// retrieval, vectorK and lexicalK are the default retrieval mode and
	// leg depths; fusion, rrfK and fusionWeight merge a hybrid's legs.
	retrieval         string
	vectorK, lexicalK int
	collapse          string
	fusion            string
	rrfK              float64
	fusionWeight      float64
	shutdownTimeout   time.Duration
	reloadInterval    time.Duration
	readOnly          bool
	maxDocBytes       int64
	maxIngests        int
	ingestWait        time.Duration
	chunkSize         int
	chunkOverlap      int
	recorderQueue     int
	spoolDir          string
	spoolMaxBytes     int64
	logFormat         string
	hideReasoning     bool
	warmup            warmupFlag
	pprofAddr         string
	insecureNoAuth    bool
	allowedModels     listFlag
	keysReload        time.Duration
	authFailures      auth.Rate
	otlpEndpoint      string
	otlpProtocol      string
	traceURLTemplate  string
	redisURL          string
	redisPrefix       string
	backendStreams    int
	// sources says where each flag's value came from (parseFlagSources).
	sources map[string]string
}

// warmupFlag is --llm-warmup: off, connect (given bare: open the pool) or
// request (also send one 1-token request).
type warmupFlag string

func (w *warmupFlag) String() string { return string(*w) }

// IsBoolFlag lets --llm-warmup stand alone, meaning connect.
func (w *warmupFlag) IsBoolFlag() bool { return true }

func (w *warmupFlag) Set(v string) error {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "", "off", "false", "0", "no":
		*w = "off"
	case "true", "1", "yes", "connect":
		*w = "connect"
	case "request":
		*w = "request"
	default:
		return fmt.Errorf("want off, connect or request, got %q", v)
	}
	return nil
}

func (c *serveConfig) register(fs *flag.FlagSet) {
	fs.StringVar(&c.addr, "addr", "127.0.0.1:8080", "address to listen on (host:port; port 0 picks a free one); without API keys serve runs open only on a loopback address (see --insecure-no-auth)")
	c.parts.register(fs)
	c.db.register(fs)
	fs.Var(&c.corsOrigins, "cors-origins", "comma-separated origins (scheme://host[:port]) allowed to call the API from a browser, e.g. https://app.example.com; without API keys, the only other sites whose pages may write (POST/DELETE) here (default: none)")
	fs.Var(&c.allowedHosts, "allowed-hosts", "comma-separated host names, besides localhost, IP addresses and the --addr host, that requests may name in their Host header while serve runs without API keys, e.g. rag.internal; any other gets 403 host_denied, so a page whose name is pointed at this machine (DNS rebinding) cannot use it (default: none)")
	fs.BoolVar(&c.insecureNoAuth, "insecure-no-auth", false, "serve without API keys on a non-loopback --addr: anyone who reaches the port may ask on your bill, read every question and change documents (without keys serve otherwise refuses any address but loopback)")
	fs.Var(&c.allowedModels, "allowed-models", "comma-separated models a request may ask for with \"model\" (default: any; a key's --models narrow it further); the configured --llm-model is always allowed")
	fs.DurationVar(&c.keysReload, "keys-reload", 2*time.Second, "how often serve rereads the API keys (so keys created or revoked take effect) and writes their last use")
	c.authFailures = auth.Rate{N: 20, Per: time.Minute}
	fs.Var(&c.authFailures, "auth-failure-rate", "failed API key checks one client address (an IPv6 client per /64) may make, as 20/min, 100/hour or 0 (off): past them its requests with a key get 429 auth_throttled with Retry-After until the bucket refills; at most 10,000 addresses are remembered")
	fs.BoolVar(&c.storeQuestion, "store-question", true, "store the question text; false stores only its SHA-256")
	fs.IntVar(&c.maxQuestionChars, "max-question-chars", pipeline.DefaultMaxQuestion, "longest accepted question, in characters")
	fs.IntVar(&c.maxConcurrent, "max-concurrent", defaultMaxConcurrent(), "streams answered at once by this process (default: 16 per core); more wait up to --queue-timeout in the queue stage, then get 503 server_busy (0: no limit)")
	fs.IntVar(&c.callerConcurrent, "max-concurrent-per-caller", 4, "streams one caller (an API key without a --concurrency of its own, or a client IP when serve runs without keys) may have open at once; more wait up to --queue-timeout, then get 429 too_many_streams (0: no limit)")
	fs.DurationVar(&c.queueTimeout, "queue-timeout", 2*time.Second, "longest wait for a free stream (the queue stage) before an ask is refused with 429 or 503 and Retry-After")
	c.rate = auth.Rate{N: 60, Per: time.Minute}
	fs.Var(&c.rate, "rate", "asks per caller (an API key without a --rate of its own, or a client IP when serve runs without keys), as 60/min, 5/s, 1000/hour or 0 (off); bursts of ten seconds' worth pass, beyond that 429 rate_limited with Retry-After")
	fs.DurationVar(&c.bodyTimeout, "body-timeout", 30*time.Second, "a request body must arrive within this (from the end of its headers), else 408 body_timeout (0: no limit)")
	fs.DurationVar(&c.idleTimeout, "idle-timeout", time.Minute, "how long an idle keep-alive connection is kept open")
	fs.DurationVar(&c.writeTimeout, "stream-write-timeout", 10*time.Second, "a client that takes no /ask event for this long (up to half as long again: the deadline is moved once per stream, not per event) is cut, its upstream call cancelled and its query stored as cancelled with code client_stalled")
	fs.DurationVar(&c.heartbeat, "sse-heartbeat", 15*time.Second, "send an SSE comment (: keep-alive) when a stream has been silent this long, so proxies do not cut it during a long prefill (0: never)")
	fs.DurationVar(&c.sseRetry, "sse-retry", 2*time.Second, "reconnection delay sent in each stream's retry: field; a query whose client disconnects keeps running twice this long for the client to resume with Last-Event-ID")
	fs.IntVar(&c.maxContextTokens, "max-context-tokens", pipeline.DefaultMaxContextTokens, "token budget for retrieved context in the prompt; lower-ranked chunks are dropped to fit (serve.max_context_tokens in --config)")
	c.embedCache.register(fs)
	c.budget.register(fs)
	fs.IntVar(&c.topK, "top-k", pipeline.DefaultTopK, fmt.Sprintf("top_k of an ask that gives none: chunks the search returns (1-%d; serve.top_k in --config)", pipeline.MaxTopK))
	fs.IntVar(&c.rerankTopN, "rerank-top-n", pipeline.DefaultRerankTopN, "rerank_top_n of an ask that gives none: reranked chunks kept for the context, capped at the ask's top_k (0: reranking off; serve.rerank_top_n in --config)")
	fs.StringVar(&c.retrieval, "retrieval", "", "retrieval of an ask that names none: hybrid (vector and BM25 legs, fused), vector or lexical (default: hybrid when the store has a lexical leg: the embedded store, and a Qdrant collection created with its sparse vector; vector otherwise)")
	fs.IntVar(&c.vectorK, "vector-k", 0, fmt.Sprintf("vector leg's depth for an ask that gives no vector_k (1-%d; 0: top_k alone, max(top_k, %d) in a hybrid)", pipeline.MaxLegK, pipeline.DefaultLegK))
	fs.IntVar(&c.lexicalK, "lexical-k", 0, fmt.Sprintf("lexical leg's depth for an ask that gives no lexical_k (1-%d; 0: top_k alone, max(top_k, %d) in a hybrid)", pipeline.MaxLegK, pipeline.DefaultLegK))
	fs.StringVar(&c.collapse, "collapse", pipeline.CollapseDoc, "collapse of an ask that names none: doc (each leg keeps the best chunk of each document, the legs are fused by document and the result holds one chunk per document, so one long page cannot fill top_k) or none (chunks ranked as they are)")
	fs.StringVar(&c.fusion, "fusion", "", "how a hybrid retrieval merges its legs: rrf (reciprocal rank fusion) or weighted (min-max normalised scores, weighted); unset: weighted with the vector leg at 0.3 over the hash embedder (its vectors hash the same words BM25 reads, so they add little beside it), rrf over a model's embeddings")
	fs.Float64Var(&c.rrfK, "rrf-k", pipeline.DefaultRRFK, "reciprocal rank fusion's k: a chunk scores the sum of 1/(k + rank) over the legs that found it")
	fs.Float64Var(&c.fusionWeight, "fusion-vector-weight", 0.5, "with --fusion weighted, the vector leg's weight (0-1); the lexical leg's is 1 minus it")
	fs.DurationVar(&c.shutdownTimeout, "shutdown-timeout", 15*time.Second, "on SIGINT/SIGTERM, how long open streams may finish before they are cut")
	fs.BoolVar(&c.readOnly, "read-only", false, "open the embedded index read-only: POST/DELETE /v1/documents answer 503 and a concurrent ragtime ingest may write (picked up every --reload-interval); by default serve holds the writer lock, and serves read-only only when another process holds it")
	fs.DurationVar(&c.reloadInterval, "reload-interval", 2*time.Second, "with --read-only, how often to pick up what a concurrent ragtime ingest saved (0: never)")
	fs.Int64Var(&c.maxDocBytes, "max-document-bytes", 10<<20, "largest document or uploaded file POST /v1/documents accepts; a multipart request may hold 8 times this")
	fs.IntVar(&c.maxIngests, "max-concurrent-ingests", api.DefaultMaxConcurrentIngests, "POST /v1/documents requests processed at once; each holds its documents' chunks and vectors in memory until it commits")
	fs.DurationVar(&c.ingestWait, "ingest-wait", api.DefaultIngestWait, "how long a POST /v1/documents waits for one of --max-concurrent-ingests before 503 ingest_busy")
	fs.IntVar(&c.chunkSize, "chunk-size", retrieval.DefaultChunkSize, "chunk size in characters, for documents posted to /v1/documents")
	fs.IntVar(&c.chunkOverlap, "chunk-overlap", retrieval.DefaultChunkOverlap, "characters shared by neighbouring chunks, for documents posted to /v1/documents")
	fs.IntVar(&c.recorderQueue, "recorder-queue", postgres.DefaultQueueSize, "finished queries held in memory while Postgres is slow; when Postgres is away or this is full they go to the disk spool (--spool-dir)")
	fs.StringVar(&c.spoolDir, "spool-dir", "", "directory of the disk spool that keeps finished queries while Postgres is away, replayed into it when it is back (default: DATA-DIR/spool; off: no spool, records past --recorder-queue are dropped)")
	fs.Int64Var(&c.spoolMaxBytes, "spool-max-bytes", spool.DefaultMaxBytes, "largest the disk spool may grow, in bytes (about 1.9 KB per query: the 1 GiB default holds ~550,000); past it records are dropped, counted and logged")
	fs.StringVar(&c.logFormat, "log-format", "text", "log format on stderr: text or json")
	fs.BoolVar(&c.hideReasoning, "hide-reasoning", false, "do not forward the model's reasoning deltas to clients (they are still timed: first_token_ms vs ttft_ms)")
	fs.StringVar(&c.pprofAddr, "pprof-addr", "", "serve Go's profiler (/debug/pprof/) on this loopback address, e.g. 127.0.0.1:6060, apart from the API (empty: off)")
	fs.StringVar(&c.otlpEndpoint, "otlp-endpoint", "", "send one OpenTelemetry trace per query to this OTLP receiver, e.g. http://127.0.0.1:4318 (HTTP) or http://127.0.0.1:4317 with --otlp-protocol grpc; overrides OTEL_EXPORTER_OTLP_ENDPOINT, and the other OTEL_* variables apply (docs/tracing.md; default: those variables, else off)")
	fs.StringVar(&c.otlpProtocol, "otlp-protocol", "", "OTLP protocol of --otlp-endpoint: http/protobuf or grpc (default: OTEL_EXPORTER_OTLP_PROTOCOL, else http/protobuf)")
	fs.StringVar(&c.traceURLTemplate, "trace-url-template", "", "link to a query's trace on /queries/:id, {trace_id} replaced by its trace id, e.g. http://localhost:16686/trace/{trace_id} (Jaeger)")
	fs.StringVar(&c.redisURL, "redis-url", "", "Redis that replicas share per-caller rate and stream limits, per-backend stream leases and resumable streams through, e.g. redis://:PASSWORD@redis:6379/0 (rediss:// for TLS; the password is never logged; redis.url in --config). Empty: every limit and resume stays per replica (docs/scaling.md)")
	fs.IntVar(&c.backendStreams, "max-concurrent-backend", 0, "streams the model backend (--llm-base-url) answers at once: across every replica sharing --redis-url, per replica without it; more wait up to --queue-timeout, then get 503 server_busy (0: no limit)")
	fs.StringVar(&c.redisPrefix, "redis-prefix", "ragtime:", "prefix of every Redis key serve writes, so that deployments sharing one Redis do not share limits (redis.key_prefix in --config)")
	c.warmup = "off"
	fs.Var(&c.warmup, "llm-warmup", "at start, open the LLM connection pool so the first user does not pay DNS/TCP/TLS (--llm-warmup or =connect), and with =request also send one 1-token request; off by default")
}

// Valid reports every problem of serve's own settings at once, by flag
// name, before anything is opened; the parts' settings are checked when they
// are built.
func (c *serveConfig) Valid(ctx context.Context) map[string]string {
	problems := map[string]string{}
	if c.logFormat != "text" && c.logFormat != "json" {
		problems["log-format"] = fmt.Sprintf("--log-format must be text or json, got %q", c.logFormat)
	}
	if err := api.ValidateOrigins(c.corsOrigins); err != nil {
		problems["cors-origins"] = "--cors-origins: " + err.Error()
	}
	if err := api.ValidateHosts(c.allowedHosts); err != nil {
		problems["allowed-hosts"] = "--allowed-hosts: " + err.Error()
	}
	if err := pipeline.CheckTopK("--top-k", c.topK); err != nil {
		problems["top-k"] = err.Error()
	}
	if c.rerankTopN < 0 || c.rerankTopN > pipeline.MaxTopK {
		problems["rerank-top-n"] = fmt.Sprintf("--rerank-top-n must be between 0 and %d, got %d", pipeline.MaxTopK, c.rerankTopN)
	}
	if err := pipeline.CheckRetrieval("--retrieval", c.retrieval, true); err != nil {
		problems["retrieval"] = err.Error()
	}
	if err := pipeline.CheckCollapse("--collapse", c.collapse); err != nil {
		problems["collapse"] = err.Error()
	}
	for name, k := range map[string]int{"vector-k": c.vectorK, "lexical-k": c.lexicalK} {
		if k < 0 || k > pipeline.MaxLegK {
			problems[name] = fmt.Sprintf("--%s must be between 0 (the default rule) and %d, got %d", name, pipeline.MaxLegK, k)
		}
	}
	if err := c.fusionConfig("").Check(); err != nil {
		problems["fusion"] = err.Error()
	}
	if c.maxContextTokens < 1 {
		problems["max-context-tokens"] = fmt.Sprintf("--max-context-tokens must be at least 1, got %d", c.maxContextTokens)
	}
	c.embedCache.valid(problems)
	c.budget.valid(problems)
	if c.keysReload <= 0 {
		problems["keys-reload"] = fmt.Sprintf("--keys-reload must be positive, got %s", c.keysReload)
	}
	if c.maxDocBytes < 1 {
		problems["max-document-bytes"] = fmt.Sprintf("--max-document-bytes must be positive, got %d", c.maxDocBytes)
	}
	if c.spoolMaxBytes < 1 {
		problems["spool-max-bytes"] = fmt.Sprintf("--spool-max-bytes must be positive, got %d", c.spoolMaxBytes)
	}
	if c.maxIngests < 1 {
		problems["max-concurrent-ingests"] = fmt.Sprintf("--max-concurrent-ingests must be at least 1, got %d", c.maxIngests)
	}
	if c.ingestWait <= 0 {
		problems["ingest-wait"] = fmt.Sprintf("--ingest-wait must be positive, got %s", c.ingestWait)
	}
	if c.parts.store == "qdrant" {
		if err := c.parts.qdrant.Validate(); err != nil {
			problems["qdrant-cluster"] = err.Error()
		}
	}
	if c.maxConcurrent < 0 {
		problems["max-concurrent"] = fmt.Sprintf("--max-concurrent must be 0 (no limit) or more, got %d", c.maxConcurrent)
	}
	if c.backendStreams < 0 {
		problems["max-concurrent-backend"] = fmt.Sprintf("--max-concurrent-backend must be 0 (no limit) or more, got %d", c.backendStreams)
	}
	if c.redisURL != "" && !strings.HasPrefix(c.redisURL, "redis://") && !strings.HasPrefix(c.redisURL, "rediss://") && !strings.HasPrefix(c.redisURL, "unix://") {
		problems["redis-url"] = fmt.Sprintf("--redis-url must start with redis://, rediss:// or unix://, got %s", upstream.RedactURL(c.redisURL))
	}
	if c.callerConcurrent < 0 {
		problems["max-concurrent-per-caller"] = fmt.Sprintf("--max-concurrent-per-caller must be 0 (no limit) or more, got %d", c.callerConcurrent)
	}
	if c.writeTimeout <= 0 {
		problems["stream-write-timeout"] = fmt.Sprintf("--stream-write-timeout must be positive (a client that stops reading must not hold a stream forever), got %s", c.writeTimeout)
	}
	if c.otlpEndpoint != "" {
		if _, err := tracing.ParseEndpoint(c.otlpEndpoint); err != nil {
			problems["otlp-endpoint"] = err.Error()
		}
	}
	if p := c.otlpProtocol; p != "" && p != tracing.ProtocolGRPC && p != tracing.ProtocolHTTP {
		problems["otlp-protocol"] = fmt.Sprintf("--otlp-protocol must be grpc or http/protobuf, got %q", p)
	}
	if err := api.ValidateTraceURLTemplate(c.traceURLTemplate); err != nil {
		problems["trace-url-template"] = "--trace-url-template: " + err.Error()
	}
	for name, d := range map[string]time.Duration{"queue-timeout": c.queueTimeout, "body-timeout": c.bodyTimeout,
		"idle-timeout": c.idleTimeout, "sse-heartbeat": c.heartbeat, "sse-retry": c.sseRetry} {
		if d < 0 {
			problems[name] = fmt.Sprintf("--%s must not be negative, got %s", name, d)
		}
	}
	return problems
}

// defaults are the knobs (ttft_budget_ms among them) an ask without them gets; lexical says whether
// the store has a lexical leg.
func (c *serveConfig) defaults(leg lexicalLeg) pipeline.Defaults {
	mode := c.retrieval
	if mode == "" {
		mode = leg.defaultMode()
	}
	d := pipeline.Defaults{TopK: c.topK, RerankTopN: c.rerankTopN, RerankOff: c.rerankTopN == 0,
		Retrieval: mode, VectorK: c.vectorK, LexicalK: c.lexicalK, Collapse: c.collapse,
		TTFTBudgetMs: c.budget.budgetMs}
	leg.apply(&d)
	return d
}

// fusionConfig is how a hybrid retrieval merges its legs over embedder's
// vectors: as --fusion says, or defaultFusion when it is unset.
func (c *serveConfig) fusionConfig(embedder string) pipeline.Fusion {
	if c.fusion == "" {
		f := defaultFusion(embedder)
		f.K = c.rrfK
		return f
	}
	w := c.fusionWeight
	return pipeline.Fusion{Method: c.fusion, K: c.rrfK, VectorWeight: &w}
}

// defaultFusion is the fusion over embedder's vectors when none is set:
// weighted with the vector leg at 0.3 over the hash embedder, rrf over any
// other. The hash embedder's vectors hash the words BM25 reads, so they add
// little beside it: on the 149 labelled questions of make bench-retrieval
// this weighting finds more than either leg alone, where rrf finds less
// than BM25 alone (docs/tuning.md).
func defaultFusion(embedder string) pipeline.Fusion {
	if embedder != "hash" {
		return pipeline.Fusion{Method: pipeline.FusionRRF}
	}
	w := 0.3
	return pipeline.Fusion{Method: pipeline.FusionWeighted, VectorWeight: &w}
}

// problemsError is a usage error listing every problem, ordered by flag.
func problemsError(problems map[string]string) error {
	msgs := make([]string, 0, len(problems))
	for _, flag := range slices.Sorted(maps.Keys(problems)) {
		msgs = append(msgs, problems[flag])
	}
	return &usageError{msg: strings.Join(msgs, "; ")}
}

func runServe(ctx context.Context, env *environment, args []string) error {
	fs := newFlagSet(env, "serve", "serve [flags]")
	var cfg serveConfig
	cfg.register(fs)
	var err error
	if cfg.sources, err = parseFlagSources(fs, env, args); err != nil {
		return err
	}
	if problems := cfg.Valid(ctx); len(problems) > 0 {
		return problemsError(problems)
	}
	log, err := newLogger(env, cfg.logFormat)
	if err != nil {
		return err
	}
	if err := checkPprofAddr(cfg.pprofAddr); err != nil {
		return err
	}
	app := newServeApp(&cfg, env, log)
	if err := app.Open(ctx); err != nil {
		return err
	}
	defer app.Close()
	return app.Run(ctx)
}

// tracer sets up OpenTelemetry tracing from --otlp-endpoint and the OTEL_*
// variables; nil when neither asks for it.
func (c *serveConfig) tracer(ctx context.Context, env *environment, parts *parts, log *slog.Logger) (*tracing.Tracer, error) {
	t, err := tracing.Setup(ctx, c.tracingConfig(env, log))
	if err != nil {
		return nil, &usageError{msg: err.Error()}
	}
	if t == nil {
		return nil, nil
	}
	if parts.remote != nil {
		t.SetLLMServer(parts.remote.BaseURL())
	}
	tg := t.Target()
	log.Info("tracing: one OpenTelemetry trace per query", "otlp_endpoint", tg.Endpoint, "otlp_endpoint_from", tg.EndpointFrom,
		"otlp_protocol", tg.Protocol, "trace_url_template", c.traceURLTemplate)
	return t, nil
}

// tracingConfig is the tracing part of the flags, with where the endpoint
// came from.
func (c *serveConfig) tracingConfig(env *environment, log *slog.Logger) tracing.Config {
	return tracing.Config{Endpoint: c.otlpEndpoint, EndpointFrom: c.sources["otlp-endpoint"], Protocol: c.otlpProtocol,
		Getenv: env.getenv, Logger: log}
}

// traceContext is the API's reader of incoming trace context: nil without
// tracing, so that requests pay nothing for it.
func traceContext(t *tracing.Tracer) func(context.Context, http.Header) context.Context {
	if t == nil {
		return nil
	}
	return t.Extract
}

// shutdownTracer flushes the traces still queued, for at most
// tracerShutdownTimeout.
func shutdownTracer(t *tracing.Tracer, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), tracerShutdownTimeout)
	defer cancel()
	if err := t.Shutdown(ctx); err != nil {
		log.Warn("tracing: flushing the last traces failed", "err", err)
	}
}

// tracerShutdownTimeout bounds the flush of the last traces at shutdown.
const tracerShutdownTimeout = 5 * time.Second

// preflightTimeout bounds serve's start-up check of the LLM provider.
const preflightTimeout = 3 * time.Second

// preflightLLM runs doctor's checks up to the connection (key, base URL,
// proxy, DNS, TCP and TLS; nothing is requested of the provider, so nothing
// is billed) within timeout, and logs one warning naming the failing check
// and the doctor command that shows every check. It never stops serve.
func preflightLLM(ctx context.Context, c llmConfig, configFile string, getenv func(string) string, timeout time.Duration, log *slog.Logger) {
	if c.provider == "extractive" {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	key, keyFrom := c.apiKey(getenv)
	checks := llm.Diagnose(ctx, llm.DiagnoseConfig{
		Provider: c.provider, CheckTimeout: timeout, ConnectOnly: true,
		Config: llm.Config{BaseURL: c.baseURL, Model: c.model, APIKey: key, KeyEnv: keyFrom,
			Timeout: c.timeout, TTFTTimeout: c.ttftTimeout, Getenv: getenv},
	})
	for _, ch := range checks {
		if ch.Status != llm.CheckFail {
			continue
		}
		if errors.Is(context.Cause(ctx), context.Canceled) {
			return // serve is stopping
		}
		msg := ch.Detail
		if ch.Code != "" {
			msg = ch.Code + ": " + msg
		}
		log.Warn(fmt.Sprintf("LLM preflight failed at %s: %s; serving anyway, asks will fail until it is fixed; run `%s` for every check",
			ch.Name, msg, doctorCommand(c, configFile)))
		return
	}
	log.Info("LLM preflight passed (key, DNS, connect)", "provider", c.provider, "model", c.model)
}

// doctorCommand is the ragtime doctor command line that checks the same
// LLM configuration as c (from configFile when one was given).
func doctorCommand(c llmConfig, configFile string) string {
	args := []string{"ragtime doctor"}
	if configFile != "" {
		args = append(args, "--config "+shell.Quote(configFile))
	}
	args = append(args, "--llm-provider "+shell.Quote(c.provider))
	if c.baseURL != "" {
		args = append(args, "--llm-base-url "+shell.Quote(c.baseURL))
	}
	if c.model != "" {
		args = append(args, "--llm-model "+shell.Quote(c.model))
	}
	if c.keyEnv != APIKeyEnv {
		args = append(args, "--llm-api-key-env "+shell.Quote(c.keyEnv))
	}
	return strings.Join(args, " ")
}

// defaultMaxConcurrent is --max-concurrent's default: 16 streams per core.
// A stream mostly waits on the model, so a core carries several; the bound
// is there so that a flood of asks queues (and is refused) instead of
// sharing the CPU until every answer is late.
func defaultMaxConcurrent() int { return 16 * runtime.GOMAXPROCS(0) }

// idlePerHost sizes the upstream idle pool per host to the calls serve lets
// be in flight to one host at once: one per admitted stream (an ask embeds,
// reranks, then generates, one call at a time) and the embedding batches of
// the ingests it runs at once. Below that, every call past the pool's size
// closes its connection when it ends and the next opens one (sockets pile up
// in TIME_WAIT towards the model). Without --max-concurrent, 0: no limit
// (upstream.Options), the pool keeping what was in flight.
func (c *serveConfig) idlePerHost() int {
	if c.maxConcurrent == 0 {
		return 0
	}
	return c.maxConcurrent + c.maxIngests*documentBatches
}

// admission builds admission control from the flags (checked by Valid).
func (c *serveConfig) admission(shared *redisstate.Store, backend string) (*admission.Controller, error) {
	cfg := admission.Config{MaxStreams: c.maxConcurrent, MaxWait: c.queueTimeout, Backend: backend, BackendStreams: c.backendStreams}
	if shared != nil {
		cfg.Shared = shared
	}
	return admission.New(cfg)
}

// openShared connects to --redis-url (nil without one). A Redis that does
// not answer at start stops serve: a deployment configured to share its
// limits should not start counting them per replica unnoticed; once
// running, an outage falls back per concern (docs/scaling.md).
func (c *serveConfig) openShared(ctx context.Context, log *slog.Logger) (*redisstate.Store, error) {
	if c.redisURL == "" {
		return nil, nil
	}
	s, err := redisstate.Open(ctx, c.redisURL, redisstate.Options{Prefix: c.redisPrefix, Logger: log})
	if err != nil {
		return nil, err
	}
	log.Info("sharing limits and resumable streams with the other replicas through Redis",
		"redis_url", upstream.RedactURL(c.redisURL), "prefix", c.redisPrefix)
	return s, nil
}

// backendKey names the model backend in its shared lease key: the
// provider and a hash of its base URL (which may carry credentials), so
// that replicas sending to the same backend share one bound.
func backendKey(p *parts) string {
	if p.remote == nil {
		return p.provider
	}
	sum := sha256.Sum256([]byte(p.remote.BaseURL()))
	return p.provider + ":" + hex.EncodeToString(sum[:8])
}

// sharedLimits is shared as the failed key checks' shared buckets, or nil.
func sharedLimits(shared *redisstate.Store) admission.RateLimiter {
	if shared == nil {
		return nil
	}
	return shared
}

// sharedStreams is shared as the streams' shared log, or nil.
func sharedStreams(shared *redisstate.Store) api.SharedStreams {
	if shared == nil {
		return nil
	}
	return shared
}

// openSpool opens the disk spool --spool-dir names (DATA-DIR/spool by
// default); nil with --spool-dir off, or when another process uses it (a
// --read-only serve next to a writer sharing its data dir).
func (c *serveConfig) openSpool(log *slog.Logger) (*spool.Spool, error) {
	dir := c.spoolDir
	switch dir {
	case "off":
		log.Warn("--spool-dir off: finished queries past --recorder-queue are dropped while Postgres is away")
		return nil, nil
	case "":
		dir = filepath.Join(c.parts.dataDir, "spool")
	}
	sp, err := spool.Open(dir, spool.Options{MaxBytes: c.spoolMaxBytes, Logger: log})
	if errors.Is(err, spool.ErrLocked) {
		log.Warn("another process uses the spool directory: this one has no spool (records past --recorder-queue are dropped while Postgres is away); give it its own --spool-dir",
			"spool_dir", dir)
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("opening the spool under --spool-dir %s: %w", dir, err)
	}
	return sp, nil
}

// spoolHeadroom is the free spool space below which a database outage
// makes serve not ready (503) rather than degraded: records are about to be
// dropped.
const spoolHeadroom = 1 << 20

// databaseReady is the readiness check of the database part: ready when
// it is migrated and answers; otherwise degraded (200) while the spool
// keeps the records, and not ready (503) without a spool, with a full one,
// or with a schema newer than this binary.
func databaseReady(boot *postgres.Bootstrap, store *postgres.Store, rec *postgres.Recorder, spooled bool, spoolMax int64) api.ReadyCheck {
	return func(ctx context.Context) error {
		var err error
		if boot != nil {
			err = boot.Err()
		}
		if err == nil {
			err = store.Ping(ctx)
		}
		if err == nil || !spooled {
			return err
		}
		var newer *postgres.SchemaNewerError
		if errors.As(err, &newer) {
			return err // someone must act; waiting will not cure it
		}
		st := rec.Stats().Spool
		if spoolMax-st.Bytes < spoolHeadroom {
			return fmt.Errorf("%w; the spool is full (--spool-max-bytes %d): finished queries are being dropped", err, spoolMax)
		}
		return fmt.Errorf("%v; finished queries are spooled to disk (%d held) and written when it is back (%w)",
			err, st.Records, api.ErrDegraded)
	}
}

// storeReady is the readiness check of the vector store. A Qdrant
// collection nobody has written yet is degraded (200), not unready: behind a
// load balancer the replicas must take traffic for the first POST
// /v1/documents to create it (asks meanwhile end with
// store_collection_missing and its hint).
func storeReady(s store) api.ReadyCheck {
	return func(ctx context.Context) error {
		err := s.Ready(ctx)
		var pe *ragtime.Error
		if errors.As(err, &pe) && pe.Kind == ragtime.KindUpstreamNotFound { // a store whose collection is missing
			return fmt.Errorf("%w; POST /v1/documents or `ragtime ingest --store qdrant` creates it (%w)", err, api.ErrDegraded)
		}
		return err
	}
}

// closeRecorder flushes what the recorder still holds, for up to 10 s.
func closeRecorder(rec *postgres.Recorder, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := rec.Close(ctx); err != nil {
		log.Error("flushing recorded queries", "err", err)
	}
	st := rec.Stats()
	log.Info("recorder flushed", "written", st.Written, "dropped", st.Dropped, "failed", st.Failed,
		"spool_records", st.Spool.Records, "spool_bytes", st.Spool.Bytes)
}

func newLogger(env *environment, format string) (*slog.Logger, error) {
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(env.stderr, nil)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(env.stderr, nil)), nil
	default:
		return nil, &usageError{msg: fmt.Sprintf("--log-format must be text or json, got %q", format)}
	}
}

// roundMs is a duration in milliseconds with microsecond resolution.
func roundMs(d time.Duration) float64 { return float64(d.Round(time.Microsecond)) / 1e6 }

// servePprof serves net/http/pprof on addr, which must be a loopback
// address: profiles show code paths and timings, not for the public port.
// Empty addr serves nothing.
func servePprof(addr string, log *slog.Logger) (stop func(), err error) {
	if addr == "" {
		return func() {}, nil
	}
	if err := checkPprofAddr(addr); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--pprof-addr: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	log.Info("profiler serving", "url", "http://"+ln.Addr().String()+"/debug/pprof/")
	return func() { _ = srv.Close() }, nil
}

// checkPprofAddr refuses a --pprof-addr that is not loopback host:port.
func checkPprofAddr(addr string) error {
	if addr == "" {
		return nil
	}
	host, _, err := net.SplitHostPort(addr)
	if ip := net.ParseIP(host); err != nil || (host != "localhost" && (ip == nil || !ip.IsLoopback())) {
		return &usageError{msg: fmt.Sprintf("--pprof-addr must be a loopback host:port such as 127.0.0.1:6060, got %q", addr)}
	}
	return nil
}

// keysSnapshotFile, under --data-dir, keeps the API keys as last loaded
// (prefixes and hashes, never tokens), for a serve started while Postgres
// is away.
const keysSnapshotFile = "api-keys.snapshot.json"

// loadKeys fills the keyring from Postgres and keeps a snapshot of what it
// read (no keys included); when Postgres cannot be read, from the snapshot.
// With neither, nothing says whether keys exist, so the keyring stays
// unloaded: every API request fails closed (503 auth_unavailable), on
// loopback too, until Keyring.Sync loads them.
func loadKeys(ctx context.Context, keys *auth.Keyring, st auth.Store, snapshot string, log *slog.Logger) {
	err := keys.Load(ctx, st)
	if err == nil {
		// Even none: that there were no keys is what lets a later serve
		// started while Postgres is away run open on loopback.
		if serr := keys.SaveSnapshot(snapshot); serr != nil {
			log.Warn("cannot save the API keys' snapshot", "err", serr)
		}
		return
	}
	saved, serr := keys.LoadSnapshot(snapshot)
	if serr != nil {
		log.Warn("cannot read the API keys from Postgres and there is no snapshot of them: until Postgres answers, every API request gets 503 auth_unavailable (keys may exist, so serve does not run open, on loopback either)",
			"err", err)
		return
	}
	log.Warn("cannot read the API keys from Postgres: checking keys against the snapshot saved earlier until it answers",
		"saved_at", saved, "err", err)
}

// authMode decides whether serve may run and returns the one line that says
// how: with API keys, every request needs one; without, serve runs open on
// a loopback address, and elsewhere only with --insecure-no-auth (as Redis'
// protected mode does). Keys created later turn auth on while serve runs.
func authMode(keys *auth.Keyring, addr string, loopback, insecure bool) (string, error) {
	switch {
	case !keys.Loaded() && (loopback || insecure):
		return "API keys unknown: neither Postgres nor a snapshot could be read, so every API request gets 503 auth_unavailable until Postgres answers", nil
	case !keys.Loaded():
		return fmt.Sprintf("API keys unknown: neither Postgres nor a snapshot could be read, so every API request gets 503 auth_unavailable until Postgres answers; "+
			"should it hold no keys, %s is not loopback and --insecure-no-auth is not set, so requests then get 503 auth_no_keys until `ragtime keys create` makes one", addr), nil
	case keys.Enabled():
		return "API keys required: requests without a valid key get 401 (ragtime keys list shows them)", nil
	case loopback:
		return fmt.Sprintf("no API keys: running open on loopback %s, so anyone on this machine may ask, read and change documents; `ragtime keys create` turns keys on", addr), nil
	case insecure:
		return fmt.Sprintf("no API keys and --insecure-no-auth: running OPEN on %s: anyone who reaches it may ask on your bill, read every question and change documents", addr), nil
	}
	return "", &usageError{msg: fmt.Sprintf("refusing to serve on %s without API keys: anyone who reaches it could ask on your bill, read every question and change documents. "+
		"Create a key (ragtime keys create --name admin --scopes admin), listen on a loopback address (--addr 127.0.0.1:8080), "+
		"or pass --insecure-no-auth to run open anyway", addr)}
}

// addrHost is the host of --addr ("" when it has none).
func addrHost(addr string) string {
	host, _, _ := net.SplitHostPort(addr)
	return host
}

// allowedModels is --allowed-models with the configured model added, so the
// default stays askable by name; nil when the flag is not set.
func allowedModels(flag []string, configured string) []string {
	if len(flag) == 0 {
		return nil
	}
	out := slices.Clone(flag)
	if configured != "" && !slices.Contains(out, configured) {
		out = append(out, configured)
	}
	return out
}
