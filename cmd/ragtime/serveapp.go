package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"ragtime/admission"
	"ragtime/api"
	"ragtime/auth"
	"ragtime/internal/lifecycle"
	"ragtime/internal/spool"
	"ragtime/internal/upstream"
	"ragtime/metrics"
	"ragtime/pipeline"
	"ragtime/postgres"
	"ragtime/redisstate"
	"ragtime/tracing"
)

// serveApp is `ragtime serve`: Open starts its steps in the order
// serveSteps lists them, Run serves until ctx ends and the open streams
// have drained, Close stops the steps the other way round, logging each.
type serveApp struct {
	cfg   *serveConfig
	env   *environment
	log   *slog.Logger
	steps *lifecycle.Steps

	db           *pgxpool.Pool
	boot         *postgres.Bootstrap
	keys         *auth.Keyring
	keyStore     auth.Store
	keysSnapshot string
	parts        *parts
	readOnly     bool
	ln           net.Listener
	loopback     bool
	authLine     string
	sp           *spool.Spool
	rec          *postgres.Recorder
	searches     *postgres.SearchRecorder
	mx           *metrics.Metrics
	tracer       *tracing.Tracer
	pl           *pipeline.Pipeline
	leg          lexicalLeg
	shared       *redisstate.Store
	asks         *api.TrackedAsker
	handler      *api.Server
	stopPprof    func()
	stopReload   func()
}

// newServeApp is serve with its checked configuration and its logger.
func newServeApp(cfg *serveConfig, env *environment, log *slog.Logger) *serveApp {
	a := &serveApp{cfg: cfg, env: env, log: log}
	a.steps = lifecycle.New(a.serveSteps()...)
	a.steps.Logger = log
	return a
}

// serveSteps are serve's parts in the order Open starts them; Close stops
// them from the last to the first, so each part stops before what it uses:
// the index reload, the profiler and the LLM preflight first (the server
// has drained already), then Redis and tracing, the search recorder and
// the recorder (which flushes, to Postgres or to the spool), the spool,
// the API keys' sync (which writes the keys' last use), the listener, the
// parts (the index, the model clients), and last the database's
// bootstrap and its pool, which everything before it may still write
// through.
func (a *serveApp) serveSteps() []lifecycle.Step {
	return []lifecycle.Step{
		{Name: "database", Start: a.openDatabase, Stop: a.closeDatabase},
		{Name: "api keys", Start: a.loadKeys},
		{Name: "parts", Start: a.buildParts, Stop: func() { a.parts.Close() }},
		{Name: "listener", Start: a.listen, Stop: func() { _ = a.ln.Close() }},
		a.goStep("api keys sync", func(ctx context.Context) {
			a.keys.Sync(ctx, a.keyStore, a.cfg.keysReload, a.keysSnapshot, a.log)
		}, true),
		{Name: "spool", Start: a.openSpool, Stop: a.closeSpool},
		{Name: "recorder", Start: a.openRecorder, Stop: func() { closeRecorder(a.rec, a.log) }},
		{Name: "search recorder", Start: a.openSearches, Stop: func() { a.searches.Close() }},
		{Name: "tracing", Start: a.openTracing, Stop: a.closeTracing},
		{Name: "pipeline", Start: a.buildPipeline},
		{Name: "redis", Start: a.openRedis, Stop: a.closeRedis},
		{Name: "api", Start: a.buildAPI},
		// The preflight runs beside serving: a broken LLM configuration
		// is named at start, not at the first ask, and serve starts as
		// quickly.
		a.goStep("llm preflight", func(ctx context.Context) {
			preflightLLM(ctx, a.cfg.parts.llm, a.cfg.parts.configFile, a.env.getenv, preflightTimeout, a.log)
		}, false),
		{Name: "llm warm-up", Start: a.warmup},
		{Name: "banner", Start: a.announce},
		{Name: "profiler", Start: a.startPprof, Stop: func() { a.stopPprof() }},
		{Name: "index reload", Start: a.watchIndex, Stop: func() { a.stopReload() }},
	}
}

// Open starts serve's steps; on an error, what was started is stopped.
func (a *serveApp) Open(ctx context.Context) error { return a.steps.Open(ctx) }

// Run serves until ctx ends, then lets open streams finish for
// --shutdown-timeout.
func (a *serveApp) Run(ctx context.Context) error {
	if err := api.Serve(ctx, a.ln, a.handler, api.ServeOptions{ShutdownTimeout: a.cfg.shutdownTimeout,
		IdleTimeout: a.cfg.idleTimeout, Queries: a.asks, Logger: a.log}); err != nil {
		return err
	}
	a.log.Info("server stopped; flushing recorded queries")
	return nil
}

// Close stops the started steps, the last started first.
func (a *serveApp) Close() { a.steps.Close() }

// goStep is a step that runs f in a goroutine until Close: with cancel,
// Close cancels f's context (which outlives the serve ctx) and waits;
// without, f gets the serve ctx and Close only waits for it to return.
func (a *serveApp) goStep(name string, f func(context.Context), cancel bool) lifecycle.Step {
	var done chan struct{}
	var stop context.CancelFunc = func() {}
	return lifecycle.Step{Name: name,
		Start: func(ctx context.Context) error {
			if cancel {
				ctx, stop = context.WithCancel(context.WithoutCancel(ctx))
			}
			done = make(chan struct{})
			go func() {
				defer close(done)
				f(ctx)
			}()
			return nil
		},
		Stop: func() { stop(); <-done },
	}
}

// openDatabase opens the pool. A database that is away is no reason not
// to serve: answers come from the index, records go to the spool, and the
// database is created and migrated once it answers. Anything else (a bad
// URL, a refused login, a schema newer than this binary) stops serve here.
func (a *serveApp) openDatabase(ctx context.Context) error {
	db, err := a.cfg.db.open(ctx, true)
	if postgres.Unavailable(err) {
		a.log.Warn("PostgreSQL is unavailable: serving anyway; finished queries are spooled to disk and the database is migrated when it answers",
			"err", err)
		cause := err
		db, err = postgres.NewPool(a.cfg.db.url)
		if err == nil {
			a.boot = postgres.StartBootstrap(a.cfg.db.url, db, cause, a.log)
		}
	}
	if err != nil {
		return err
	}
	a.db = db
	return nil
}

// closeDatabase stops the bootstrap, then closes the pool.
func (a *serveApp) closeDatabase() {
	if a.boot != nil {
		a.boot.Stop()
	}
	a.db.Close()
}

func (a *serveApp) loadKeys(ctx context.Context) error {
	a.keys = auth.NewKeyring()
	a.keyStore = postgres.NewKeys(a.db)
	a.keysSnapshot = filepath.Join(a.cfg.parts.dataDir, keysSnapshotFile)
	loadKeys(ctx, a.keys, a.keyStore, a.keysSnapshot, a.log)
	return nil
}

func (a *serveApp) buildParts(ctx context.Context) error {
	cfg := a.cfg
	cfg.parts.lockedReadOnly = true
	cfg.parts.pool = upstream.NewPool(upstream.Options{IdlePerHost: cfg.idlePerHost()})
	cfg.parts.logger = a.log
	p, err := cfg.parts.build(ctx, a.env, !cfg.readOnly)
	if err != nil {
		return err
	}
	a.parts = p
	a.readOnly = cfg.readOnly || p.readOnly
	if p.readOnly && !cfg.readOnly {
		a.log.Warn("another process holds the index's writer lock: serving it read-only (POST/DELETE /v1/documents answer 503; what the writer saves is picked up every --reload-interval)",
			"data_dir", cfg.parts.dataDir)
	}
	return nil
}

// listen binds --addr. It refuses before binding when the address alone
// says it is not loopback (":8080", "0.0.0.0:8080"); a host name is judged
// once it is bound.
func (a *serveApp) listen(context.Context) error {
	cfg := a.cfg
	if host, _, err := net.SplitHostPort(cfg.addr); err == nil {
		if ip := net.ParseIP(host); host == "" || (ip != nil && !ip.IsLoopback()) {
			if _, err := authMode(a.keys, cfg.addr, false, cfg.insecureNoAuth); err != nil {
				return err
			}
		}
	}
	ln, err := net.Listen("tcp", cfg.addr)
	if err != nil {
		return fmt.Errorf("listening on --addr %s: %w", cfg.addr, err)
	}
	tcp, _ := ln.Addr().(*net.TCPAddr)
	a.loopback = tcp != nil && tcp.IP.IsLoopback()
	a.authLine, err = authMode(a.keys, ln.Addr().String(), a.loopback, cfg.insecureNoAuth)
	if err != nil {
		_ = ln.Close()
		return err
	}
	a.ln = ln
	return nil
}

func (a *serveApp) openSpool(context.Context) error {
	sp, err := a.cfg.openSpool(a.log)
	if err != nil {
		return err
	}
	if a.sp = sp; sp == nil {
		return lifecycle.ErrSkipped
	}
	return nil
}

func (a *serveApp) closeSpool() { _ = a.sp.Close() }

func (a *serveApp) openRecorder(context.Context) error {
	a.rec = postgres.NewRecorder(a.db, postgres.RecorderOptions{
		QueueSize: a.cfg.recorderQueue, Logger: a.log, Spool: a.sp, StartSpooling: a.sp != nil && a.boot != nil,
	})
	return nil
}

func (a *serveApp) openSearches(context.Context) error {
	a.searches = postgres.NewSearchRecorder(a.db, a.log)
	return nil
}

// openTracing builds the metrics, which observe each finished query on its
// way to the recorder, after its timings are taken, so they never touch
// them, and the tracer when one is asked for.
func (a *serveApp) openTracing(ctx context.Context) error {
	a.mx = metrics.New(a.rec)
	t, err := a.cfg.tracer(ctx, a.env, a.parts, a.log)
	if err != nil {
		return err
	}
	if a.tracer = t; t == nil {
		return lifecycle.ErrSkipped
	}
	a.mx.Tracing(t)
	return nil
}

func (a *serveApp) closeTracing() { shutdownTracer(a.tracer, a.log) }

func (a *serveApp) buildPipeline(ctx context.Context) error {
	cfg, parts := a.cfg, a.parts
	leg := lexicalLegOf(parts.store) // the embedded store's BM25, or Qdrant's sparse vectors
	if err := leg.check("--retrieval", cfg.retrieval, parts.storeName); err != nil {
		return err
	}
	a.leg = leg
	embedder, cache, err := cfg.embedCache.wrap(parts, &cfg.parts)
	if err != nil {
		return err
	}
	if cache != nil {
		a.mx.EmbedCache(cache)
	}
	live := cfg.budget.live(ctx, postgres.NewStore(a.db), a.log)
	a.pl, err = pipeline.New(pipeline.Config{
		Embedder: embedder, Searcher: parts.store, Lexical: leg.lex, Fusion: cfg.fusionConfig(parts.embedderName),
		Reranker: parts.reranker, SearchRecorder: a.searches,
		Generator: parts.generator, Counter: parts.counter, Recorder: live.Recorder(a.mx.Recorder(a.rec)),
		EmbedderName: parts.embedderName, StoreName: parts.storeName, RerankerName: parts.rerankerName,
		SearchAttrs: parts.store.SearchAttrs(),
		Provider:    parts.provider, Model: parts.model,
		MaxContextTokens: cfg.maxContextTokens,
		StoreQuestion:    cfg.storeQuestion, HideReasoning: cfg.hideReasoning,
		Tracer:    a.tracer.Hook(),
		Predictor: live, BudgetQuantile: cfg.budget.quantile,
	})
	return err
}

func (a *serveApp) openRedis(ctx context.Context) error {
	shared, err := a.cfg.openShared(ctx, a.log)
	if err != nil {
		return err
	}
	if a.shared = shared; shared == nil {
		return lifecycle.ErrSkipped
	}
	a.mx.Shared(shared)
	return nil
}

func (a *serveApp) closeRedis() { _ = a.shared.Close() }

// buildAPI builds admission control and the HTTP handler.
func (a *serveApp) buildAPI(context.Context) error {
	cfg, parts := a.cfg, a.parts
	admit, err := cfg.admission(a.shared, backendKey(parts))
	if err != nil {
		return err
	}
	a.mx.Admission(admit)
	a.asks = api.Track(a.pl)
	store := postgres.NewStore(a.db)
	a.handler = api.NewServer(api.Deps{
		Asker:     a.asks,
		Retriever: a.pl,
		Queries:   store,
		List:      store,
		Stats:     store,
		Metrics:   a.mx.Handler(),
		Ready: map[string]api.ReadyCheck{
			"postgres": databaseReady(a.boot, store, a.rec, a.sp != nil, cfg.spoolMaxBytes),
			"index":    storeReady(parts.store),
		},
		ReadyDetails:         func() map[string]any { return map[string]any{"recorder": a.rec.Stats()} },
		Documents:            newDocumentStore(parts, a.readOnly, cfg.chunkSize, cfg.chunkOverlap),
		MaxDocumentBytes:     cfg.maxDocBytes,
		MaxConcurrentIngests: cfg.maxIngests,
		IngestWait:           cfg.ingestWait,
		Logger:               a.log,
		CORSOrigins:          cfg.corsOrigins,
		AllowedHosts:         append(slices.Clone(cfg.allowedHosts), addrHost(cfg.addr)),
		Keys:                 a.keys,
		AuthFailures:         cfg.authFailures,
		SharedAuthFailures:   sharedLimits(a.shared),
		RefuseOpen:           !a.loopback && !cfg.insecureNoAuth,
		DefaultModel:         parts.model,
		AllowedModels:        allowedModels(cfg.allowedModels, parts.model),
		MaxQuestionChars:     cfg.maxQuestionChars,
		Defaults:             cfg.defaults(a.leg),
		Admission:            admit,
		CallerLimits:         admission.Limits{Concurrent: cfg.callerConcurrent, Rate: cfg.rate},
		BodyTimeout:          cfg.bodyTimeout,
		Stream:               api.StreamOptions{WriteTimeout: cfg.writeTimeout, Heartbeat: cfg.heartbeat, Retry: cfg.sseRetry, Shared: sharedStreams(a.shared)},
		TraceContext:         traceContext(a.tracer),
		TraceURLTemplate:     cfg.traceURLTemplate,
	})
	return nil
}

// warmup opens the LLM connection pool (and with =request sends one
// 1-token request) when --llm-warmup asks; a failure is logged, not fatal.
func (a *serveApp) warmup(ctx context.Context) error {
	cfg, parts := a.cfg, a.parts
	if cfg.warmup == "off" || parts.remote == nil {
		return nil
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	start := time.Now()
	err := parts.remote.Warmup(wctx, cfg.warmup == "request")
	cancel()
	if err != nil {
		a.log.Warn("LLM warm-up failed; serving anyway", "mode", string(cfg.warmup), "err", err)
	} else {
		a.log.Info("LLM connection warmed up", "mode", string(cfg.warmup), "base_url", parts.remote.BaseURL(), "ms", roundMs(time.Since(start)))
	}
	return nil
}

// announce prints the serving line and logs how callers are checked.
func (a *serveApp) announce(context.Context) error {
	parts := a.parts
	fmt.Fprintf(a.env.stdout, "ragtime serving on http://%s (embedder %s, store %s, reranker %s, llm %s/%s, %d chunks)\n",
		a.ln.Addr(), parts.embedderName, parts.storeName, parts.rerankerName, parts.provider, parts.model, parts.store.Len())
	if a.keys.Enabled() {
		a.log.Info(a.authLine)
	} else {
		a.log.Warn(a.authLine)
	}
	if parts.store.Len() == 0 {
		a.log.Warn("the index under --data-dir is empty: every answer will say nothing was found; add documents with POST /v1/documents, or stop serve and run 'ragtime ingest --data-dir DIR PATH...'")
	}
	return nil
}

func (a *serveApp) startPprof(context.Context) error {
	if a.cfg.pprofAddr == "" {
		return lifecycle.ErrSkipped
	}
	stop, err := servePprof(a.cfg.pprofAddr, a.log)
	a.stopPprof = stop
	return err
}

// watchIndex picks up, with --read-only, what a concurrent ingest saves.
func (a *serveApp) watchIndex(ctx context.Context) error {
	reload := a.cfg.reloadInterval
	if !a.readOnly {
		reload = 0 // the writer's index is its own; nothing to pick up
	}
	a.stopReload = a.parts.store.Watch(ctx, reload, a.log)
	return nil
}
