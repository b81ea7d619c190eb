package sweep

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/google/uuid"

	"ragtime"
	"ragtime/pipeline"
)

// Asker runs one question through the timed stages into a stream and
// returns the query's record: *pipeline.Pipeline in-process, *api.Client
// against a running server.
type Asker interface {
	Run(ctx context.Context, req *pipeline.Request, out pipeline.Stream) *ragtime.Record
}

// Store keeps the sweep's row and tags queries with it; *postgres.Sweeps
// implements it.
type Store interface {
	Start(ctx context.Context, id, mode string, seed int64, params any) error
	Finish(ctx context.Context, id, status string, summary any) error
	Tag(ctx context.Context, id string, queryIDs []string) (int64, error)
}

// Modes of a sweep.
const (
	ModeInProcess = "in-process"
	ModeServer    = "server"
)

// Statuses of a finished sweep (as in the sweeps table).
const (
	StatusDone        = "done"
	StatusInterrupted = "interrupted"
	StatusFailed      = "failed"
)

// Params are a sweep's parameters, as stored in sweeps.params and the JSON
// file.
type Params struct {
	QuestionsFile    string    `json:"questions_file"`
	Questions        int       `json:"questions"`
	Labelled         int       `json:"labelled_questions"`
	Settings         []Setting `json:"settings"`
	Runs             int       `json:"runs"`
	Concurrency      int       `json:"concurrency"`
	MaxTokens        int       `json:"max_tokens"`
	Model            string    `json:"model,omitempty"`
	RecallTolerance  float64   `json:"recall_tolerance"`
	TTFTBudgetMs     float64   `json:"ttft_budget_ms,omitempty"`
	Server           string    `json:"server,omitempty"`
	Provider         string    `json:"provider,omitempty"`
	Seed             int64     `json:"seed"`
	WarmupPerSetting int       `json:"warmup_per_setting"`
	// WarmCache measures the warm path: no per-query nonce, so repeated
	// runs and queries sharing a context prefix may be served from the
	// server's prefix cache. By default (false) every query carries a nonce
	// right after the system prompt and shares at most the system prompt
	// with anything sent before it.
	WarmCache bool `json:"warm_cache"`
}

// Config is one sweep to run.
type Config struct {
	Params
	Mode      string
	Questions []Question
	Asker     Asker
	// Store, when set, stores the sweep row (and, in server mode, tags the
	// server's query rows with the sweep id).
	Store Store
	// Progress, when set, is called after each measured query.
	Progress func(done, total int)
	// Log receives a few lines about what the sweep is doing (seed,
	// warm-up, tagging); nil discards them.
	Log io.Writer
	// TagWait bounds how long a server-mode sweep waits for the server's
	// recorder to store the queries it tags (default 15s).
	TagWait time.Duration
	// Defaults, when set, resolve each in-process request's unset
	// retrieval knobs (mode, leg depths) as serve would, so the pipeline
	// runs what an ask to serve would run; a server resolves its own.
	Defaults *pipeline.Defaults
}

// Report is what a sweep measured.
type Report struct {
	SweepID    string    `json:"sweep_id"`
	Mode       string    `json:"mode"`
	Status     string    `json:"status"`
	StartedAt  time.Time `json:"started_at"`
	FinishedAt time.Time `json:"finished_at"`
	Params     Params    `json:"params"`
	// Planned counts the (question, setting, run) queries scheduled,
	// Measured those that returned (any status).
	Planned  int `json:"planned"`
	Measured int `json:"measured"`
	// Tagged counts the queries stored with the sweep id (server mode:
	// tagged after the fact; in-process: recorded with it).
	Tagged         int64          `json:"tagged"`
	Settings       []Result       `json:"settings"`
	Recommendation Recommendation `json:"recommendation"`
	// Warnings say what the figures cannot be trusted for, such as
	// settings whose samples were mostly prefix-cache hits.
	Warnings []string `json:"warnings,omitempty"`
	Samples  []Sample `json:"samples"`
}

// summary is what goes into sweeps.summary.
type summary struct {
	Planned        int            `json:"planned"`
	Measured       int            `json:"measured"`
	Settings       []Result       `json:"settings"`
	Recommendation Recommendation `json:"recommendation"`
	Warnings       []string       `json:"warnings,omitempty"`
}

// job is one scheduled query.
type job struct {
	order    int
	setting  Setting
	question int
	run      int
	// nonce goes right after the system prompt (empty with WarmCache).
	nonce string
}

// Run runs the sweep: an uncounted warm-up query per setting, then every
// (question, setting, run) in an order shuffled with the seed, Concurrency
// at a time. When ctx ends it stops taking queries, and returns the report
// of what was measured with status interrupted (and a nil error). It fails
// only when the warm-up fails or the store cannot be written at the start.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	logf := func(format string, args ...any) {
		if cfg.Log != nil {
			fmt.Fprintf(cfg.Log, format+"\n", args...)
		}
	}
	rep := &Report{SweepID: uuid.NewString(), Mode: cfg.Mode, StartedAt: time.Now().UTC(), Params: cfg.Params}
	for _, q := range cfg.Questions {
		if len(q.Relevant) > 0 {
			rep.Params.Labelled++
		}
	}
	rep.Params.Questions = len(cfg.Questions)
	rep.Params.WarmupPerSetting = 1
	finishCtx := context.WithoutCancel(ctx)
	if cfg.Store != nil {
		if err := cfg.Store.Start(ctx, rep.SweepID, cfg.Mode, cfg.Seed, rep.Params); err != nil {
			return nil, err
		}
	}
	logf("sweep %s: %d questions (%d with relevance labels) x %d settings x %d runs = %d queries, seed %d, concurrency %d",
		rep.SweepID, len(cfg.Questions), rep.Params.Labelled, len(cfg.Settings), cfg.Runs,
		len(cfg.Questions)*len(cfg.Settings)*cfg.Runs, cfg.Seed, cfg.Concurrency)

	// Warm-up: one query per setting, not counted and not tagged, so cold
	// connections, caches and lazy loading do not land in the first setting.
	logf("warm-up: %d queries (not counted)", len(cfg.Settings))
	for i, st := range cfg.Settings {
		s := cfg.ask(ctx, job{setting: st, nonce: cfg.nonce(rep.SweepID, fmt.Sprintf("w%d", i+1))}, "")
		if ctx.Err() != nil {
			break
		}
		if s.Status != ragtime.StatusOK {
			err := fmt.Errorf("warm-up query at %s failed: %s", st, s.Error)
			if cfg.Store != nil {
				_ = cfg.Store.Finish(finishCtx, rep.SweepID, StatusFailed, summary{})
			}
			return nil, err
		}
	}

	jobs := cfg.schedule()
	for i := range jobs {
		jobs[i].nonce = cfg.nonce(rep.SweepID, fmt.Sprint(jobs[i].order))
	}
	rep.Planned = len(jobs)
	sweepID := ""
	if cfg.Mode == ModeInProcess {
		sweepID = rep.SweepID
	}
	samples := make([]Sample, 0, len(jobs))
	var mu sync.Mutex
	next := make(chan job)
	var wg sync.WaitGroup
	for range cfg.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range next {
				s := cfg.ask(ctx, j, sweepID)
				mu.Lock()
				samples = append(samples, s)
				n := len(samples)
				mu.Unlock()
				if cfg.Progress != nil {
					cfg.Progress(n, len(jobs))
				}
			}
		}()
	}
feed:
	for _, j := range jobs {
		select {
		case next <- j:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()

	rep.Status = StatusDone
	if ctx.Err() != nil {
		rep.Status = StatusInterrupted
		logf("interrupted: %d of %d queries measured; writing what was measured", len(samples), len(jobs))
	}
	rep.Samples = samples
	rep.Measured = len(samples)
	if cfg.Store != nil {
		rep.Tagged = cfg.tag(finishCtx, rep, logf)
	}
	rep.Settings = Summarize(cfg.Settings, samples)
	rep.Recommendation = Recommend(rep.Settings, cfg.RecallTolerance, cfg.TTFTBudgetMs, cfg.Runs)
	rep.Warnings = append(cacheWarnings(rep.Settings, cfg.WarmCache), sampleWarnings(rep.Settings, cfg.Runs)...)
	rep.FinishedAt = time.Now().UTC()
	if cfg.Store != nil {
		sum := summary{Planned: rep.Planned, Measured: rep.Measured, Settings: rep.Settings, Recommendation: rep.Recommendation, Warnings: rep.Warnings}
		if err := cfg.Store.Finish(finishCtx, rep.SweepID, rep.Status, sum); err != nil {
			return rep, err
		}
	}
	return rep, nil
}

func (cfg *Config) check() error {
	switch {
	case len(cfg.Questions) == 0:
		return errors.New("sweep: no questions")
	case len(cfg.Settings) == 0:
		return errors.New("sweep: no settings")
	case cfg.Asker == nil:
		return errors.New("sweep: nothing to ask (no pipeline, no server)")
	case cfg.Mode != ModeInProcess && cfg.Mode != ModeServer:
		return fmt.Errorf("sweep: mode must be %s or %s, got %q", ModeInProcess, ModeServer, cfg.Mode)
	}
	if cfg.MaxTokens == 0 {
		cfg.MaxTokens = pipeline.DefaultMaxTokens
	}
	if err := cfg.Params.Check(); err != nil {
		return fmt.Errorf("sweep: %w", err)
	}
	if cfg.TagWait <= 0 {
		cfg.TagWait = 15 * time.Second
	}
	return nil
}

// schedule lists every (question, setting, run) once, shuffled with the
// seed, so that drift over the sweep (a warming cache, a neighbour's load)
// spreads over all settings instead of masquerading as an effect of one.
func (cfg *Config) schedule() []job {
	var jobs []job
	for run := 1; run <= cfg.Runs; run++ {
		for _, st := range cfg.Settings {
			for q := range cfg.Questions {
				jobs = append(jobs, job{setting: st, question: q, run: run})
			}
		}
	}
	seed := uint64(cfg.Seed)
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	rng.Shuffle(len(jobs), func(i, j int) { jobs[i], jobs[j] = jobs[j], jobs[i] })
	for i := range jobs {
		jobs[i].order = i + 1
	}
	return jobs
}

// nonce names one query of the sweep for the prompt (empty with
// WarmCache): unique within the sweep, and across sweeps by the sweep id.
func (cfg *Config) nonce(sweepID, query string) string {
	if cfg.WarmCache {
		return ""
	}
	return "sweep " + shortID(sweepID) + " query " + query
}

// ask runs one job and turns its record into a sample.
func (cfg *Config) ask(ctx context.Context, j job, sweepID string) Sample {
	q := cfg.Questions[j.question]
	req := pipeline.Request{
		Question: q.Text, TopK: j.setting.TopK, RerankTopN: j.setting.RerankTopN,
		MaxTokens: cfg.MaxTokens, Model: cfg.Model,
		MaxContextTokens: j.setting.MaxContextTokens, SweepID: sweepID, PromptNonce: j.nonce,
		Retrieval: j.setting.Retrieval, VectorK: j.setting.VectorK, LexicalK: j.setting.LexicalK,
		TTFTBudgetMs: j.setting.TTFTBudgetMs,
	}
	if cfg.Defaults != nil {
		if err := req.NormalizeWith(pipeline.DefaultMaxQuestion, *cfg.Defaults); err != nil {
			return Sample{Setting: j.setting, Question: j.question, Run: j.run, Order: j.order,
				Status: ragtime.StatusError, Error: "invalid_request: " + err.Error()}
		}
	}
	var out collector
	rec := cfg.Asker.Run(ctx, &req, &out)
	s := Sample{Setting: j.setting, Question: j.question, Run: j.run, Order: j.order,
		QueryID: rec.QueryID, Status: rec.Status, Docs: distinctDocs(out.docs), BudgetOutcome: rec.BudgetOutcome}
	if rec.BudgetDropped != nil {
		s.BudgetDropped = *rec.BudgetDropped
	}
	if rec.Status != ragtime.StatusOK {
		s.Error = rec.ErrorCode
		if rec.ErrorMessage != "" {
			s.Error += ": " + rec.ErrorMessage
		}
		return s
	}
	if rec.TTFTMs == nil {
		s.Status, s.Error = ragtime.StatusError, "no_answer: the query finished without an answer token"
		return s
	}
	s.TTFTMs = *rec.TTFTMs
	s.RetrievalMs = rec.RetrievalMs
	s.LLMPrefillMs = rec.LLMPrefillMs
	if rec.RetrievalShare != nil {
		s.RetrievalShare = *rec.RetrievalShare
	}
	s.PromptTokens = rec.Usage.PromptTokens
	s.CachedTokens = rec.Usage.CachedTokens
	other := rec.QueueMs
	if rec.OverheadMs != nil {
		other += *rec.OverheadMs
	}
	s.Stages = Breakdown{Retrieval: rec.RetrievalMs, LLMConnect: round3(rec.GenTTFTMs - rec.LLMPrefillMs),
		LLMPrefill: rec.LLMPrefillMs, Other: round3(other)}
	s.score(q.Relevant)
	return s
}

// tag makes sure the measured queries carry the sweep id. In-process, the
// pipeline recorded them with it; against a server, the server recorded
// them untagged (its API does not let callers write into a sweep), so the
// sweep tags them by the query ids the streams carried, waiting up to
// TagWait for the server's recorder to store them.
func (cfg *Config) tag(ctx context.Context, rep *Report, logf func(string, ...any)) int64 {
	if cfg.Mode != ModeServer {
		var n int64
		for _, s := range rep.Samples {
			if s.QueryID != "" {
				n++
			}
		}
		return n
	}
	var ids []string
	for _, s := range rep.Samples {
		if s.QueryID != "" {
			ids = append(ids, s.QueryID)
		}
	}
	var tagged int64
	deadline := time.Now().Add(cfg.TagWait)
	for len(ids) > 0 {
		n, err := cfg.Store.Tag(ctx, rep.SweepID, ids)
		if err != nil {
			logf("tagging the server's queries: %v", err)
			break
		}
		tagged += n
		if tagged >= int64(len(ids)) || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if tagged < int64(len(ids)) {
		logf("tagged %d of %d queries with the sweep id; the rest are not in this database (is --database-url the server's database, and its recorder keeping up?)", tagged, len(ids))
	}
	return tagged
}

// collector is the pipeline.Stream of a sweep's query: it keeps the
// sources' document ids and drops everything else (the record carries the
// timings).
type collector struct {
	docs []string
}

func (c *collector) Meta(pipeline.Meta) error       { return nil }
func (c *collector) Stage(pipeline.StageSpan) error { return nil }
func (c *collector) Sources(src []pipeline.Source) error {
	for _, s := range src {
		c.docs = append(c.docs, s.DocID)
	}
	return nil
}
func (c *collector) Delta(pipeline.Delta) error { return nil }
func (c *collector) Done(ragtime.Record) error  { return nil }
func (c *collector) Fail(*ragtime.Error) error  { return nil }
