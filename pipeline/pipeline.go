package pipeline

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/google/uuid"

	"ragtime"
)

// Config wires a Pipeline. Embedder, Searcher, Generator and Counter are
// required; a nil Reranker means reranking is off; a nil Recorder stores
// nothing.
type Config struct {
	Embedder Embedder
	Searcher Searcher
	// Lexical is the store's lexical leg; nil when it has none (only
	// vector retrieval is then possible).
	Lexical   LexicalSearcher
	Reranker  Reranker
	Generator Generator
	Counter   TokenCounter
	Recorder  ragtime.Recorder
	// SearchRecorder stores retrieval-only queries (Search); nil stores
	// nothing.
	SearchRecorder SearchRecorder
	// Tracer, when set, follows each query in a distributed trace.
	Tracer Tracer
	// Predictor, when set, is the live prefill model a TTFT budget
	// predicts by; BudgetQuantile is the quantile it predicts at (one of
	// BudgetQuantiles; 0: 0.9).
	Predictor      TTFTPredictor
	BudgetQuantile float64

	// Names shown in meta and stage attrs.
	EmbedderName string
	StoreName    string
	RerankerName string
	Provider     string
	Model        string
	// SearchAttrs are added to every search stage's attrs (the store's
	// settings, such as its ef or whether it searches exactly).
	SearchAttrs map[string]any
	// Fusion merges the legs of a hybrid retrieval.
	Fusion Fusion

	// MaxContextTokens is the budget for retrieved context in the prompt;
	// lower-ranked chunks are dropped (and a lone chunk trimmed) to fit.
	MaxContextTokens int
	// SystemPrompt is the stable first part of the prompt; empty uses
	// DefaultSystemPrompt.
	SystemPrompt string
	// StoreQuestion keeps the question text; false keeps only its SHA-256.
	StoreQuestion bool
	// HideReasoning times reasoning deltas but does not forward them.
	HideReasoning bool

	// Now reads the query's clock; nil means time.Now. Readings must carry
	// a monotonic part (or be a test's fake clock that only moves forward).
	Now func() time.Time
	// NewID makes a query id; nil means NewQueryID (a time-ordered UUIDv7,
	// from which the store derives the day partition to read).
	NewID func() string
}

// DefaultSystemPrompt asks the model to answer from the numbered sources.
const DefaultSystemPrompt = "You answer questions using only the numbered sources provided by the user. " +
	"Cite the sources you use as [n], where n is the source number. " +
	"If the sources do not contain the answer, say so plainly."

// DefaultMaxContextTokens is the context budget when none is configured.
const DefaultMaxContextTokens = 6000

// Pipeline runs questions through the timed stages. It is safe for
// concurrent use.
type Pipeline struct {
	cfg Config
	// systemTokens counts the system prompt once: it is the same for every
	// query, and tokenizing it on each /ask is work on the hot path.
	systemTokens int
	// memo holds the token counts of retrieved texts; frameTokens and
	// sepTokens count the fixed parts of the user message.
	memo                   *tokenMemo
	frameTokens, sepTokens int
	// localSearch: the Searcher waits on nothing outside the process, so
	// no flush is due before it (InProcessSearcher).
	localSearch bool
	// searchKeys are cfg.SearchAttrs' keys in byte order, without those
	// the search stage sets itself (stageFigs).
	searchKeys []string
}

// New checks cfg and returns a Pipeline.
func New(cfg Config) (*Pipeline, error) {
	switch {
	case cfg.Embedder == nil:
		return nil, errors.New("pipeline: no embedder configured")
	case cfg.Searcher == nil:
		return nil, errors.New("pipeline: no vector store configured")
	case cfg.Generator == nil:
		return nil, errors.New("pipeline: no generator configured")
	case cfg.Counter == nil:
		return nil, errors.New("pipeline: no token counter configured")
	}
	if err := cfg.Fusion.Check(); err != nil {
		return nil, fmt.Errorf("pipeline: %w", err)
	}
	if cfg.SystemPrompt == "" {
		cfg.SystemPrompt = DefaultSystemPrompt
	}
	if cfg.MaxContextTokens <= 0 {
		cfg.MaxContextTokens = DefaultMaxContextTokens
	}
	if cfg.RerankerName == "" {
		cfg.RerankerName = "none"
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.NewID == nil {
		cfg.NewID = NewQueryID
	}
	local, _ := cfg.Searcher.(InProcessSearcher)
	return &Pipeline{cfg: cfg, systemTokens: cfg.Counter.Count(cfg.SystemPrompt), memo: newTokenMemo(cfg.Counter),
		frameTokens: cfg.Counter.Count("Sources:\n\n"), sepTokens: cfg.Counter.Count("\n\n"),
		localSearch: local != nil && local.SearchesInProcess(), searchKeys: searchKeys(cfg.SearchAttrs)}, nil
}

// Run answers req (already normalised) into out and returns the finished
// record, which it has also handed to the Recorder. t0 is taken on entry,
// or is req.Queue.Start when the caller queued the query before Run. Run
// copies req and does not change it; the request and the record go by
// pointer because the goroutine that waits in Run (an HTTP handler's)
// keeps its frames for as long as the answer streams.
//
// A query cancelled through ctx with a *Cancel as its cause
// (context.WithCancelCause) is stored as cancelled with the cause's code.
//
// Run is Begin with the answer on a second goroutine of its own, which
// starts shallow, while the caller's waits: an answer streams for seconds
// and its goroutine parks in the model's stream all that time, so it must
// start near the top of its stack to keep within 8 KB (make
// bench-streams), and a caller deep in its own frames (a router's
// handler) would not. A panic on it is raised again on the caller's
// goroutine, with its stack.
func (p *Pipeline) Run(ctx context.Context, req *Request, out Stream) *ragtime.Record {
	answer := p.Begin(ctx, req, out)
	var rec *ragtime.Record
	OnOwnGoroutine(func() { rec = answer() })
	return rec
}

// Begin runs req up to the model's answer and returns the rest: answer,
// to be called once, streams the answer, hands the record to the Recorder,
// writes done or error and returns the record. What Run says of req, ctx
// and out holds here too.
//
// Retrieval runs on a goroutine of its own, which ends before Begin
// returns: its stack grows deep (HTTP calls, the index's search, the
// prompt) and the goroutine that parks in the model's stream must not
// keep it. answer runs on the caller's goroutine, which parks in the
// model's stream for as long as the answer streams: call it from a shallow
// frame (the API calls it from net/http's handler goroutine once the
// router's frames have returned, so that a held stream has no goroutine
// of ragtime's own), or use Run. A panic during retrieval is raised again
// on the caller's goroutine, with its stack.
func (p *Pipeline) Begin(ctx context.Context, req *Request, out Stream) (answer func() *ragtime.Record) {
	var q *query
	OnOwnGoroutine(func() { q = p.retrieve(ctx, req, out) })
	return func() *ragtime.Record { return q.answer(out) }
}

// retrieve starts the query and runs it up to the prompt: the meta event,
// then the stages before the model's.
func (p *Pipeline) retrieve(ctx context.Context, req *Request, out Stream) *query {
	q := p.start(ctx, req)
	if p.cfg.Tracer != nil {
		ctx, q.trace = p.cfg.Tracer.Start(ctx, q.t0)
	}
	q.ctx = ctx
	cfg := p.cfg
	q.model = cfg.Model
	if q.req.Model != "" {
		q.model = q.req.Model
	}
	meta := Meta{QueryID: q.id, Model: q.model, Provider: cfg.Provider, TopK: q.req.TopK,
		RerankTopN: q.req.RerankTopN, MaxTokens: q.req.MaxTokens, MaxContextTokens: q.budget(),
		Embedder: cfg.EmbedderName, Store: cfg.StoreName, Reranker: cfg.RerankerName,
		Retrieval: q.req.Retrieval, RerankNote: rerankNote(&q.req),
		TTFTBudgetMs: max(q.req.TTFTBudgetMs, 0)}
	if err := out.Meta(meta); err != nil {
		q.err = clientGone(err)
		return q
	}
	if pw, ok := cfg.Generator.(Prewarmer); ok { // the model's connection, dialled while retrieval runs
		pw.Prewarm(ctx)
	}
	q.err = q.retrieveStages(ctx, out)
	return q
}

// answer runs the generation, when retrieval succeeded, and finishes the
// query: it returns the record. The finish (the record built, recorded,
// framed as the done event and written) runs on a goroutine of its own:
// its frames are deep, and on the caller's goroutine, which parks in the
// next answer's stream when it is net/http's (Pipeline.Begin), they would
// grow the stack past 8 KB for good.
func (q *query) answer(out Stream) *ragtime.Record {
	if q.err == nil {
		q.err = q.generate(q.ctx, out)
	}
	if q.gen == nil { // retrieval failed: no generation
		q.gen = &Generation{}
	}
	OnOwnGoroutine(func() { q.finish(q.ctx, out, q.model, q.err) })
	return q.rec
}

// OnOwnGoroutine runs fn on a goroutine of its own and waits for it: for
// work whose stack grows deep (retrieval, the finish, a rare chunk's full
// decode) run from a goroutine that parks for as long as an answer streams,
// which would otherwise keep the grown stack (make bench-streams). A panic
// in fn is raised again on the caller's goroutine, with fn's stack.
func OnOwnGoroutine(fn func()) {
	done := make(chan any, 1)
	go func() {
		defer func() {
			p := recover()
			if p != nil {
				p = fmt.Errorf("%v\n%s", p, debug.Stack())
			}
			done <- p
		}()
		fn()
	}()
	if p := <-done; p != nil {
		panic(p)
	}
}

// query is one run's state: its clock and what it has observed so far.
type query struct {
	p   *Pipeline
	req Request
	id  string
	t0  time.Time
	// started is when the query started: its admission queue's start
	// (Request.Queue) or Run's; t0 is the request's arrival when the
	// caller knows it (WithArrival), else started.
	started time.Time
	arrived bool
	spans   []ragtime.Span
	// figs are the stages' attrs until the record is made (stageFigs);
	// bit i of figged is set while spans[i]'s attrs are there.
	figs   stageFigs
	figged uint64

	firstAt  time.Time // first delta of any kind flushed
	answerAt time.Time // first answer delta flushed
	// gaps holds the gaps between the deltas' arrivals: 4 bytes a token
	// (a time.Time is 24, a time.Duration 8) for as long as the answer
	// streams.
	gaps deltaGaps
	// gen is the generation's account, set when the model's stream has
	// ended (never nil by finish): the query holds no Generation's 296
	// bytes for as long as the answer streams (make bench-streams).
	gen *Generation
	// earlySpans: llm_connect and llm_prefill went out with the first token.
	earlySpans bool
	// trace is the query's distributed trace; nil without a Tracer.
	trace Trace
	// ttft is what the TTFT budget decided (fitBudget).
	ttft budgetChoice

	// Handed from retrieval's goroutine to the answer's (Pipeline.Run):
	// ctx is the query's context (with its trace), model the model asked
	// for, err retrieval's failure, greq the generation's request, taken by
	// generate; rec is the finished record.
	ctx          context.Context
	model        string
	err          error
	greq         *GenerateRequest
	promptTokens int
	rec          *ragtime.Record
	// hits are a retrieval-only query's results (Search).
	hits []Hit
}

func (p *Pipeline) start(ctx context.Context, req *Request) *query {
	started := p.cfg.Now()
	if req.Queue != nil && !req.Queue.Start.IsZero() {
		started = req.Queue.Start
	}
	q := &query{p: p, req: *req, id: p.cfg.NewID(), t0: started, started: started, spans: make([]ragtime.Span, 0, 9)}
	q.figs.p = p
	if at := ArrivalFrom(ctx); !at.IsZero() && !at.After(started) {
		q.t0, q.arrived = at, true
	}
	return q
}

// now reads the query's clock.
func (q *query) now() time.Time { return q.p.cfg.Now() }

// budget is the context budget of this query: the request's override, or
// the configured one.
func (q *query) budget() int {
	if q.req.MaxContextTokens > 0 {
		return q.req.MaxContextTokens
	}
	return q.p.cfg.MaxContextTokens
}

// clientGone is the error of a failed write to the client: the query is
// cancelled, and nothing more is written.
func clientGone(err error) error {
	return &ragtime.Error{Kind: ragtime.KindCancelled, Code: ragtime.CodeCancelled, Message: "the client went away", Err: err}
}

// retrieve runs accept, queue, embed, search and rerank, writing their
// stages to out (nil: none), and returns the hits the context is built
// from. rerankOff says whether a request with rerank_top_n 0 still records
// a rerank stage (an ask's, reranker "off") or none (a retrieval-only
// search's).
func (q *query) retrieve(ctx context.Context, out Stream, rerankOff bool) ([]Hit, error) {
	cfg := q.p.cfg

	// accept: the request's arrival → the query's start (the admission
	// queue's, or Run's)
	if q.arrived {
		if err := q.span(out, ragtime.StageAccept, q.t0, q.started, nil, nil); err != nil {
			return nil, clientGone(err)
		}
	}
	// queue: the wait the caller reported (admission control in the API)
	admitted, queueAttrs := q.started, map[string]any(nil)
	if qw := q.req.Queue; qw != nil {
		admitted, queueAttrs = qw.End, qw.Attrs
	}
	if err := q.span(out, ragtime.StageQueue, q.started, admitted, queueAttrs, nil); err != nil {
		return nil, clientGone(err)
	}

	if err := flush(out); err != nil { // meta, accept and queue, before the embedder's wait
		return nil, clientGone(err)
	}
	vecs, err := q.embed(ctx, out)
	if err != nil {
		return nil, err
	}

	if !q.p.localSearch { // the embed stage, before the store's wait
		if err := flush(out); err != nil {
			return nil, clientGone(err)
		}
	}
	var hits []Hit
	err = q.stage(ctx, out, ragtime.StageSearch, func(ctx context.Context) (map[string]any, error) {
		var attrs map[string]any
		var err error
		hits, attrs, err = q.search(ctx, vecs)
		return attrs, err
	})
	if err != nil {
		return nil, err
	}

	if q.req.RerankTopN != 0 && cfg.Reranker != nil && len(hits) > 0 { // a reranker will be called
		if err := flush(out); err != nil {
			return nil, clientGone(err)
		}
	}
	if q.req.RerankTopN == 0 && !rerankOff {
		return hits, nil
	}
	err = q.stage(ctx, out, ragtime.StageRerank, func(ctx context.Context) (map[string]any, error) {
		topN := q.req.RerankTopN
		f := &q.figs
		f.candidates, f.topN, f.reranker = len(hits), topN, cfg.RerankerName
		var attrs map[string]any // the figures', unless a call was made
		var err error
		switch {
		case topN == 0:
			f.reranker = "off"
		case cfg.Reranker == nil:
			hits = hits[:min(topN, len(hits))]
		case len(hits) > 0:
			var call Call
			hits, err = cfg.Reranker.Rerank(WithCall(ctx, &call), q.req.Question, hits, topN)
			if call.Made {
				attrs = callAttrs(call, f.attrsMap(ragtime.StageRerank))
			}
		}
		return attrs, err
	})
	return hits, err
}

// retrieveStages runs the stages before the model's (accept, queue, embed,
// search, rerank, assemble), sends the sources and leaves the generation's
// request in q.greq.
func (q *query) retrieveStages(ctx context.Context, out Stream) error {
	hits, err := q.retrieve(ctx, out, true)
	if err != nil {
		return err
	}

	var prompt promptParts
	err = q.stage(ctx, out, ragtime.StageAssemble, func(context.Context) (map[string]any, error) {
		prompt = q.fitBudget(hits, q.assemble(hits))
		f := &q.figs
		f.chunks, f.dropped = len(prompt.sources), prompt.dropped
		f.contextTokens, f.promptTokens = prompt.contextTokens, prompt.promptTokens
		return nil, nil
	})
	if err != nil {
		return err
	}
	if err := out.Sources(prompt.sources); err != nil {
		return clientGone(err)
	}
	if err := flush(out); err != nil { // the retrieval stages and the sources, before the model's wait
		return clientGone(err)
	}

	q.greq = &GenerateRequest{Model: q.req.Model, Messages: prompt.messages, MaxTokens: q.req.MaxTokens,
		Temperature: q.req.Temperature, Stop: q.req.Stop, Seed: q.req.Seed, Question: q.req.Question, Sources: prompt.sources}
	q.promptTokens = prompt.promptTokens
	return nil
}

// embed runs the embed stage: the question's vector, or nothing in a
// lexical retrieval, which needs none.
func (q *query) embed(ctx context.Context, out Stream) ([][]float32, error) {
	cfg := q.p.cfg
	var vecs [][]float32
	err := q.stage(ctx, out, ragtime.StageEmbed, func(ctx context.Context) (map[string]any, error) {
		if q.req.Retrieval == ragtime.RetrievalLexical {
			return map[string]any{"embedder": cfg.EmbedderName, "skipped": true}, nil
		}
		var call Call
		var err error
		vecs, err = cfg.Embedder.Embed(WithCall(ctx, &call), []string{q.req.Question})
		q.figs.embed = call
		if err == nil && len(vecs) != 1 {
			err = fmt.Errorf("embedder returned %d vectors for 1 text", len(vecs))
		}
		if err == nil {
			q.figs.dim, q.figs.dimKnown = len(vecs[0]), true
		}
		return nil, err
	})
	return vecs, err
}

// generate streams the answer from the model (the request retrieval left
// in q.greq, let go of here: the generator holds what it still needs) and
// adds the generation's stages.
func (q *query) generate(ctx context.Context, out Stream) error {
	greq := q.greq
	q.greq = nil
	gctx := ctx
	if q.trace != nil {
		gctx = q.trace.Generation(ctx, q.model)
	}
	q.gen = &Generation{}
	err := q.p.cfg.Generator.Generate(gctx, greq, func(d Delta) error { return q.emit(out, d) }, q.gen)
	if q.gen.Usage.PromptTokens == 0 {
		q.gen.Usage.PromptTokens = q.promptTokens
	}
	if q.gen.Usage.CompletionTokens == 0 {
		q.gen.Usage.CompletionTokens = q.gen.Chunks
	}
	if serr := q.generationSpans(out); serr != nil && err == nil {
		err = clientGone(serr)
	}
	if err != nil {
		return stageErr(ctx, q.gen.FailedStage(), err)
	}
	return nil
}

// stage runs fn as the stage name on the query's clock: it records the
// stage's span with the attrs fn returns, or with its figures in q.figs
// when fn returns none (also when fn fails), and sends it
// to out, and returns fn's error classified as the stage's failure, or the
// client's departure if the span could not be written. fn's context carries
// the stage's trace span, when the query is traced.
func (q *query) stage(ctx context.Context, out Stream, name string, fn func(context.Context) (map[string]any, error)) error {
	sctx := ctx
	if q.trace != nil {
		sctx = q.trace.Stage(ctx, name)
	}
	start := q.now()
	attrs, err := fn(sctx)
	end := q.now()
	if err != nil {
		_ = q.span(out, name, start, end, attrs, &q.figs)
		return stageErr(ctx, name, err)
	}
	if err := q.span(out, name, start, end, attrs, &q.figs); err != nil {
		return clientGone(err)
	}
	return nil
}

// emit forwards one delta to the client and stamps the first-token times
// as the delta is handed to the stream that writes and flushes it.
func (q *query) emit(out Stream, d Delta) error {
	if d.At.IsZero() {
		d.At = q.now()
	}
	// Sized once for the answer asked for (capped, as the resume buffer
	// is), rather than grown through seven copies.
	q.gaps.add(d.At.Sub(q.t0), min(max(q.req.MaxTokens, 1), maxDeltaAtCap))
	if d.Reasoning && q.p.cfg.HideReasoning {
		// Not forwarded, still timed: first_token_ms is when the hidden
		// reasoning would have been flushed.
		if q.firstAt.IsZero() {
			q.firstAt = q.now()
		}
		if !d.More { // a visible delta held before it goes out now
			if err := flush(out); err != nil {
				return clientGone(err)
			}
		}
		return q.firstTokenSpans(out, d)
	}
	first := q.firstAt.IsZero() || (!d.Reasoning && q.answerAt.IsZero())
	spans := q.bringsEarlySpans(d)
	var handed time.Time
	if first {
		// The first (answer) delta is sent at once: TTFT is its time. When
		// it brings llm_connect and llm_prefill, they go in the same write,
		// after it, rather than in a write of their own.
		d.More = spans
		// Its time is taken as it is handed to the stream, whose write and
		// flush put it on the client's socket: no byte of it can reach the
		// client before, and a stamp after the flush returned counted the
		// wait to be scheduled again (up to 179 ms under load) that the
		// client did not wait.
		handed = q.now()
	}
	if err := out.Delta(d); err != nil {
		return clientGone(err)
	}
	if spans {
		q.earlySpans = true
		if err := q.connectAndPrefill(out, d.Timing, d.At); err != nil {
			return clientGone(err)
		}
		if err := flush(out); err != nil {
			return clientGone(err)
		}
	}
	if first {
		if q.firstAt.IsZero() {
			q.firstAt = handed
		}
		if !d.Reasoning && q.answerAt.IsZero() {
			q.answerAt = handed
		}
	}
	return nil
}

// NewQueryID returns a new query id: a UUIDv7, whose first 48 bits are the
// Unix time in milliseconds. Ids made one after the other sort by time (the
// primary-key index grows at its right edge), and a reader can tell from an
// id alone which day partition holds the query. It falls back to a random
// (v4) UUID if the system's random source fails.
func NewQueryID() string {
	id, err := uuid.NewV7()
	if err != nil {
		return uuid.NewString()
	}
	return id.String()
}
