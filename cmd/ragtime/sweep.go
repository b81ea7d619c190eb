package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"ragtime"
	"ragtime/api"
	"ragtime/pipeline"
	"ragtime/postgres"
	"ragtime/prefillmodel"
	"ragtime/sweep"
)

// sweepConfig holds sweep's flags.
type sweepConfig struct {
	parts           partsConfig
	db              dbConfig
	questions       string
	topK            listFlag
	rerankTopN      listFlag
	maxContext      listFlag
	retrieval       listFlag
	vectorK         listFlag
	lexicalK        listFlag
	runs            int
	concurrency     int
	server          string
	serverKeyEnv    string
	recallTolerance float64
	ttftBudgetMs    float64
	ttftBudgets     listFlag
	out             string
	seed            int64
	maxTokens       int
	model           string
	storeQuestion   bool
	warmCache       bool
}

func (c *sweepConfig) register(fs *flag.FlagSet) {
	c.parts.register(fs)
	c.db.register(fs)
	c.topK = listFlag{"1", "2", "4", "8", "16", "32"}
	c.rerankTopN = listFlag{"default"}
	fs.StringVar(&c.questions, "questions", "", "questions file: JSONL {\"question\", \"relevant\": [doc_id, ...]} or TSV question<TAB>doc_id,doc_id (relevance optional) (required)")
	fs.Var(&c.topK, "top-k", fmt.Sprintf("comma-separated top_k values to sweep (1-%d)", pipeline.MaxTopK))
	fs.Var(&c.rerankTopN, "rerank-top-n", "comma-separated rerank_top_n values: default (what an ask without rerank_top_n gets from serve's default rule: min(k, 3)), k (rerank and keep all k), 0 (reranking off) or N (keep the best N, at most k)")
	fs.Var(&c.maxContext, "max-context-tokens", "comma-separated context budgets in tokens to sweep (in-process only; default: 6000)")
	fs.Var(&c.retrieval, "retrieval", "comma-separated retrieval modes to sweep: hybrid, vector, lexical (default: the server's or serve's --retrieval)")
	fs.Var(&c.vectorK, "vector-k", "comma-separated candidate depths of the vector leg to sweep (default: the server's)")
	fs.Var(&c.lexicalK, "lexical-k", "comma-separated candidate depths of the lexical leg to sweep (default: the server's)")
	fs.IntVar(&c.runs, "runs", 3, "times each (question, setting) is asked")
	fs.IntVar(&c.concurrency, "concurrency", 1, "queries in flight at once")
	fs.StringVar(&c.server, "server", "", "URL of a running ragtime serve to ask over HTTP (POST /ask); empty runs the pipeline in-process with the part flags")
	fs.StringVar(&c.serverKeyEnv, "server-api-key-env", "RAGTIME_API_KEY", "with --server: NAME of the environment variable holding an API key with scope ask, for a server that requires keys")
	fs.Float64Var(&c.recallTolerance, "recall-tolerance", 0.02, "recommend the smallest k whose recall is within this of the best (0-1)")
	fs.Float64Var(&c.ttftBudgetMs, "ttft-budget-ms", 0, "recommend only settings whose TTFT p95 is under this, in milliseconds (0: no budget)")
	fs.Var(&c.ttftBudgets, "ttft-budgets", "comma-separated TTFT budgets in milliseconds to compare with the fixed top_k settings: each is one more setting asked at the largest --top-k with that ttft_budget_ms, on the same questions; the fixed settings are asked with none (docs/tuning.md)")
	fs.StringVar(&c.out, "out", "", "directory for results.csv, samples.csv, sweep.json and chart.svg (default ./sweep-<id>)")
	fs.Int64Var(&c.seed, "seed", 0, "seed of the shuffled order (0: pick one and print it)")
	fs.IntVar(&c.maxTokens, "max-tokens", pipeline.DefaultMaxTokens, "answer token limit per query")
	fs.StringVar(&c.model, "model", "", "model override sent with each query (empty: the configured model)")
	fs.BoolVar(&c.storeQuestion, "store-question", true, "in-process: store the question text; false stores only its SHA-256")
	fs.BoolVar(&c.warmCache, "warm-cache", false, "measure the warm path: send no per-query nonce, so repeated runs and queries sharing a context prefix may be answered from the server's prefix cache (default: a nonce right after the system prompt, so each query shares at most the system prompt with what came before)")
}

// settings expands the knob lists into the sweep's settings, ordered by
// top_k, then rerank_top_n, then budget, each once.
func (c *sweepConfig) settings() ([]sweep.Setting, error) {
	ks, err := intList("--top-k", c.topK, 1, pipeline.MaxTopK)
	if err != nil {
		return nil, err
	}
	budgets, err := intList("--max-context-tokens", c.maxContext, 1, 1_000_000)
	if err != nil {
		return nil, err
	}
	if len(budgets) > 0 && c.server != "" {
		return nil, &usageError{msg: "--max-context-tokens cannot be swept with --server: the server assembles under its own --max-context-tokens; sweep in-process, or restart the server per budget"}
	}
	if len(budgets) == 0 && c.server == "" {
		budgets = []int{pipeline.DefaultMaxContextTokens}
	}
	if len(budgets) == 0 {
		budgets = []int{0} // the server's own
	}
	if len(c.rerankTopN) == 0 {
		return nil, &usageError{msg: "--rerank-top-n needs at least one value (default, k, 0 or a number)"}
	}
	retr, err := c.retrievalSettings()
	if err != nil {
		return nil, err
	}
	ttftBudgets, err := intList("--ttft-budgets", c.ttftBudgets, 1, pipeline.MaxTTFTBudgetMs)
	if err != nil {
		return nil, err
	}
	seen := map[sweep.Setting]bool{}
	var out []sweep.Setting
	for _, k := range ks {
		for _, raw := range c.rerankTopN {
			n := k
			if raw == "default" {
				n = pipeline.Defaults{}.RerankTopNFor(k)
			} else if raw != "k" {
				v, err := strconv.Atoi(raw)
				if err != nil || v < 0 {
					return nil, &usageError{msg: fmt.Sprintf("--rerank-top-n: %q is not default, k, 0 or a positive number", raw)}
				}
				n = min(v, k)
			}
			for _, b := range budgets {
				for _, r := range retr {
					s := r
					s.TopK, s.RerankTopN, s.MaxContextTokens = k, n, b
					if !seen[s] {
						seen[s] = true
						out = append(out, s)
					}
				}
			}
		}
	}
	// Each TTFT budget at the largest k, after the fixed settings.
	fixed := len(out)
	for _, ms := range ttftBudgets {
		for _, s := range out[:fixed] {
			if s.TopK == ks[len(ks)-1] {
				s.TTFTBudgetMs = ms
				out = append(out, s)
			}
		}
	}
	slices.SortStableFunc(out, func(a, b sweep.Setting) int {
		if a.TTFTBudgetMs != b.TTFTBudgetMs {
			return a.TTFTBudgetMs - b.TTFTBudgetMs
		}
		if a.TopK != b.TopK {
			return a.TopK - b.TopK
		}
		if a.RerankTopN != b.RerankTopN {
			return a.RerankTopN - b.RerankTopN
		}
		return a.MaxContextTokens - b.MaxContextTokens
	})
	return out, nil
}

// retrievalSettings expands --retrieval, --vector-k and --lexical-k into
// the retrieval part of the settings, in the order given: a vector setting
// has no lexical depth and a lexical one no vector depth. Without any of
// them it is one setting with the server's defaults.
func (c *sweepConfig) retrievalSettings() ([]sweep.Setting, error) {
	vks, err := intList("--vector-k", c.vectorK, 1, pipeline.MaxLegK)
	if err != nil {
		return nil, err
	}
	lks, err := intList("--lexical-k", c.lexicalK, 1, pipeline.MaxLegK)
	if err != nil {
		return nil, err
	}
	modes := []string(c.retrieval)
	if len(modes) == 0 {
		modes = []string{""}
	}
	if len(vks) == 0 {
		vks = []int{0}
	}
	if len(lks) == 0 {
		lks = []int{0}
	}
	var out []sweep.Setting
	seen := map[sweep.Setting]bool{}
	for _, m := range modes {
		if m != "" {
			if err := pipeline.CheckRetrieval("--retrieval", m, true); err != nil {
				return nil, &usageError{msg: err.Error()}
			}
		}
		for _, vk := range vks {
			for _, lk := range lks {
				s := sweep.Setting{Retrieval: m, VectorK: vk, LexicalK: lk}
				if m == ragtime.RetrievalVector {
					s.LexicalK = 0
				}
				if m == ragtime.RetrievalLexical {
					s.VectorK = 0
				}
				if !seen[s] {
					seen[s] = true
					out = append(out, s)
				}
			}
		}
	}
	return out, nil
}

// intList parses a list flag of whole numbers in [lo, hi], sorted and
// without duplicates.
func intList(flagName string, raw listFlag, lo, hi int) ([]int, error) {
	var out []int
	for _, s := range raw {
		v, err := strconv.Atoi(s)
		if err != nil || v < lo || v > hi {
			return nil, &usageError{msg: fmt.Sprintf("%s: %q is not a whole number between %d and %d", flagName, s, lo, hi)}
		}
		out = append(out, v)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

func runSweep(ctx context.Context, env *environment, args []string) error {
	cfg, err := parseSweepFlags(env, args)
	if err != nil {
		return err
	}
	params, questions, err := cfg.plan()
	if err != nil {
		return err
	}

	db, err := cfg.db.open(ctx, true)
	if err != nil {
		return err
	}
	defer db.Close()

	run := sweep.Config{
		Params: params, Questions: questions, Store: postgres.NewSweeps(db),
		Progress: sweep.ProgressBar(env.stderr, isTerminal(env.stderr)), Log: env.stderr,
	}
	warnLog := slog.New(slog.NewTextHandler(env.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	rec, release, err := cfg.asker(ctx, env, db, &run, warnLog)
	defer release()
	if err != nil {
		return err
	}
	fmt.Fprintf(env.stdout, "sweep: %d questions, %d settings, %d runs, seed %d (rerun with --seed %d for the same order)\n",
		len(questions), len(params.Settings), cfg.runs, params.Seed, params.Seed)

	rep, runErr := sweep.Run(ctx, run)
	if rec != nil {
		closeSweepRecorder(env, rec, warnLog)
	}
	if rep == nil {
		return runErr
	}
	return cfg.report(env, rep, runErr, args)
}

// parseSweepFlags reads sweep's flags: no arguments, --questions required.
func parseSweepFlags(env *environment, args []string) (*sweepConfig, error) {
	fs := newFlagSet(env, "sweep", "sweep --questions FILE [--top-k 1,2,4,8,16,32] [--runs 3] [--server URL] [flags]")
	var cfg sweepConfig
	cfg.register(fs)
	if err := parseFlags(fs, env, args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, &usageError{msg: fmt.Sprintf("sweep takes no arguments, got %q (questions go in --questions)", fs.Arg(0))}
	}
	if cfg.questions == "" {
		fs.Usage()
		return nil, &usageError{msg: "--questions is required: a JSONL or TSV file of questions (see docs/tuning.md)"}
	}
	return &cfg, nil
}

// plan checks the sweep's parameters and returns them with the settings
// and seed (drawn when --seed is 0), and the questions, loaded and checked.
func (c *sweepConfig) plan() (sweep.Params, []sweep.Question, error) {
	params := sweep.Params{
		QuestionsFile: c.questions, Runs: c.runs, Concurrency: c.concurrency,
		MaxTokens: c.maxTokens, Model: c.model, RecallTolerance: c.recallTolerance,
		TTFTBudgetMs: c.ttftBudgetMs, Server: c.server, WarmCache: c.warmCache,
	}
	if err := params.Check(); err != nil {
		return params, nil, &usageError{msg: err.Error()}
	}
	settings, err := c.settings()
	if err != nil {
		return params, nil, err
	}
	questions, err := sweep.LoadQuestions(c.questions)
	if err != nil {
		return params, nil, err
	}
	if err := sweep.CheckQuestions(c.questions, questions); err != nil {
		return params, nil, err
	}
	seed := c.seed
	if seed == 0 {
		seed = rand.Int64N(1<<53) + 1
	}
	params.Settings, params.Seed = settings, seed
	return params, questions, nil
}

// asker sets run's mode, provider and asker: a --server sweep asks the
// server; another builds the parts and a pipeline of its own (with serve's
// defaults), recording through rec, which the caller closes after the run.
// release lets go of what asker opened; the caller defers it, also when
// err is set.
func (c *sweepConfig) asker(ctx context.Context, env *environment, db *pgxpool.Pool, run *sweep.Config, warnLog *slog.Logger) (rec *postgres.Recorder, release func(), err error) {
	release = func() {}
	if c.server != "" {
		client, err := c.serverAsker(ctx, env, db, run.Questions[0].Text)
		if err != nil {
			return nil, release, err
		}
		run.Mode, run.Params.Provider, run.Asker = sweep.ModeServer, "server", client
		return nil, release, nil
	}
	parts, err := c.parts.build(ctx, env, false)
	if err != nil {
		return nil, release, err
	}
	release = func() { _ = parts.Close() }
	if parts.store.Len() == 0 {
		return nil, release, fmt.Errorf("the index under --data-dir %s is empty: run `ragtime ingest --data-dir %s PATH...` first", c.parts.dataDir, c.parts.dataDir)
	}
	rec = postgres.NewRecorder(db, postgres.RecorderOptions{Logger: warnLog})
	pl, defaults, stopLive, err := c.inProcessAsker(ctx, parts, db, rec, run.Params.Settings, warnLog)
	release = func() {
		stopLive()
		_ = parts.Close()
	}
	if err != nil {
		return nil, release, err
	}
	run.Mode, run.Params.Provider, run.Asker, run.Defaults = sweep.ModeInProcess, parts.provider, pl, defaults
	return rec, release, nil
}

// closeSweepRecorder closes an in-process sweep's recorder and warns of
// the queries it could not record.
func closeSweepRecorder(env *environment, rec *postgres.Recorder, warnLog *slog.Logger) {
	closeRecorder(rec, warnLog)
	if st := rec.Stats(); st.Dropped+st.Failed > 0 {
		fmt.Fprintf(env.stderr, "warning: %d queries could not be recorded in Postgres (%d dropped, %d rejected)\n",
			st.Dropped+st.Failed, st.Dropped, st.Failed)
	}
}

// report writes the sweep's table, its files (under --out, or
// sweep-<id>), where its queries are in Postgres and the recommended
// setting's flags; it returns the first of the files' and the run's error.
func (c *sweepConfig) report(env *environment, rep *sweep.Report, runErr error, args []string) error {
	if rep.Status == sweep.StatusInterrupted {
		fmt.Fprintf(env.stdout, "interrupted after %d of %d queries: the figures below are what was measured\n", rep.Measured, rep.Planned)
	}
	fmt.Fprintln(env.stdout)
	if err := rep.WriteTable(env.stdout); err != nil {
		return err
	}
	dir := c.out
	if dir == "" {
		dir = "sweep-" + rep.SweepID[:8]
	}
	written, werr := rep.WriteFiles(dir)
	fmt.Fprintf(env.stdout, "\nsweep %s (%s, %s): %d queries tagged in Postgres; view them with\n  SELECT * FROM sweep_results WHERE sweep_id = '%s';\n",
		rep.SweepID, rep.Status, rep.FinishedAt.Sub(rep.StartedAt).Round(100*time.Millisecond), rep.Tagged, rep.SweepID)
	for _, p := range written {
		abs, _ := filepath.Abs(p)
		fmt.Fprintf(env.stdout, "wrote %s\n", abs)
	}
	if rs := rep.Recommendation.Setting; rs != nil {
		sweep.WriteApply(env.stdout, *rs, args, postgres.RedactURL)
	}
	if werr != nil {
		return werr
	}
	return runErr
}

// serverAsker is the api.Client a --server sweep asks through, once the
// server is seen to record into the sweep's database.
func (c *sweepConfig) serverAsker(ctx context.Context, env *environment, db *pgxpool.Pool, question string) (*api.Client, error) {
	u, err := url.Parse(c.server)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, &usageError{msg: fmt.Sprintf("--server must be an http(s) URL such as http://127.0.0.1:8080, got %q", c.server)}
	}
	// One keep-alive connection per worker, as a browser or app would hold.
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = c.concurrency
	client := &api.Client{BaseURL: c.server, HTTP: &http.Client{Transport: tr}, APIKey: env.getenv(c.serverKeyEnv),
		OnWait: admissionNote(env.stderr)}
	if err := checkServerRecordsHere(ctx, client, postgres.NewStore(db), question, c.server, c.db.url, serverRecordWait); err != nil {
		return nil, err
	}
	return client, nil
}

// inProcessAsker is the pipeline an in-process sweep runs, recording into
// rec, with serve's defaults for an ask that names no retrieval: hybrid
// when the store has a lexical leg (the embedded store).
func (c *sweepConfig) inProcessAsker(ctx context.Context, parts *parts, db *pgxpool.Pool, rec *postgres.Recorder, settings []sweep.Setting,
	warnLog *slog.Logger) (*pipeline.Pipeline, *pipeline.Defaults, func(), error) {
	// The lexical leg and the default retrieval are serve's: hybrid when
	// the store has a lexical leg and its data has it (not a Qdrant
	// collection created before its sparse vector).
	leg := lexicalLegOf(parts.store)
	for _, s := range settings {
		if err := leg.check("--retrieval", s.Retrieval, parts.storeName); err != nil {
			return nil, nil, func() {}, err
		}
	}
	defaults := pipeline.Defaults{Retrieval: leg.defaultMode()}
	leg.apply(&defaults)
	// A TTFT budget predicts by the prefill model of the queries recorded
	// so far, as serve's does (its default refresh and quantile).
	live := prefillmodel.New(postgres.NewStore(db))
	liveCtx, stopLive := context.WithCancel(ctx)
	go live.Run(liveCtx, time.Second, warnLog)
	pl, err := pipeline.New(pipeline.Config{
		Embedder: parts.embedder, Searcher: parts.store, Lexical: leg.lex, Fusion: defaultFusion(parts.embedderName), Reranker: parts.reranker,
		Generator: parts.generator, Counter: parts.counter, Recorder: live.Recorder(rec),
		EmbedderName: parts.embedderName, StoreName: parts.storeName, RerankerName: parts.rerankerName,
		SearchAttrs: parts.store.SearchAttrs(),
		Provider:    parts.provider, Model: parts.model, StoreQuestion: c.storeQuestion,
		Predictor: live,
	})
	return pl, &defaults, stopLive, err
}

// serverRecordWait bounds how long the sweep waits for the server's
// recorder to store its check query.
const serverRecordWait = 10 * time.Second

// checkServerRecordsHere refuses, as a usage error, a --server that does
// not record into the sweep's --database-url (sweep.CheckServerRecords).
func checkServerRecordsHere(ctx context.Context, asker sweep.Asker, store *postgres.Store, question, serverURL, dbURL string, wait time.Duration) error {
	err := sweep.CheckServerRecords(ctx, asker, store, question, serverURL, postgres.RedactURL(dbURL), wait)
	var nr *sweep.NotRecordedError
	if errors.As(err, &nr) {
		return &usageError{msg: err.Error()}
	}
	return err
}

// admissionNote returns an api.Client OnWait that says once, on w, that the
// server is pacing the sweep and how to lift it: a sweep against `make run`'s
// server (60 asks a minute per caller by default) otherwise just looks slow.
func admissionNote(w io.Writer) func(status int, code string, wait time.Duration) {
	var once sync.Once
	return func(status int, code string, wait time.Duration) {
		once.Do(func() {
			how := "the server is busy; the sweep waits as told (fewer --concurrency, or a larger serve --max-concurrent)"
			switch code {
			case "rate_limited":
				how = "serve's per-caller --rate (60 asks a minute by default) paces this sweep; for a faster one run serve with --rate 0, or give the sweep a key (--server-api-key-env) created with a higher --rate"
			case "too_many_streams":
				how = "serve's --max-concurrent-per-caller is below the sweep's --concurrency; lower --concurrency or raise it"
			}
			fmt.Fprintf(w, "sweep: the server answered %d %s (retry after %s): %s\n", status, code, wait, how)
		})
	}
}
