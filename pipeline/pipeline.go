package pipeline

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
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

// ms converts a clock reading to milliseconds since t0, µs resolution.
func (q *query) ms(at time.Time) float64 { return roundMs(at.Sub(q.t0)) }

func roundMs(d time.Duration) float64 { return float64(d.Round(time.Microsecond)) / 1e6 }

func round3(x float64) float64 {
	return float64(time.Duration(x*1e6).Round(time.Microsecond)) / 1e6
}

// span records a finished stage and sends it to out. Its attrs are attrs
// or, when that is nil and figs is set, the stage's figures there
// (stageFigs).
func (q *query) span(out Stream, name string, start, end time.Time, attrs map[string]any, figs *stageFigs) error {
	if end.Before(start) {
		end = start
	}
	s := StageSpan{Span: ragtime.Span{Name: name, Seq: len(q.spans), StartMs: q.ms(start), Attrs: attrs}}
	if attrs == nil && figs != nil {
		if s.Seq < 64 {
			s.figs = figs
			q.figged |= 1 << s.Seq
		} else {
			s.Attrs = figs.attrsMap(name)
		}
	}
	s.DurationMs = round3(q.ms(end) - s.StartMs)
	q.spans = append(q.spans, s.Span)
	if out == nil {
		return nil
	}
	return out.Stage(s)
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

// bringsEarlySpans reports whether d is the first delta, with the
// generator's timings, and llm_connect and llm_prefill are yet to be sent.
func (q *query) bringsEarlySpans(d Delta) bool {
	return d.Timing != nil && !q.earlySpans && !d.Timing.GotConn.IsZero()
}

// firstTokenSpans sends llm_connect and llm_prefill, flushed, when a hidden
// reasoning delta brought the generator's timings (a forwarded first delta
// takes them in its own write, after it: emit; framing them adds a few
// microseconds to its TTFT, where a write of their own cost a system call
// per ask). generationSpans completes their attrs with what only the end
// of the stream tells.
func (q *query) firstTokenSpans(out Stream, d Delta) error {
	if !q.bringsEarlySpans(d) {
		return nil
	}
	q.earlySpans = true
	if err := q.connectAndPrefill(out, d.Timing, d.At); err != nil {
		return clientGone(err)
	}
	if err := flush(out); err != nil {
		return clientGone(err)
	}
	return nil
}

// connectAndPrefill adds the llm_connect and llm_prefill spans of a
// generation whose connection was obtained and first token received (at
// first; zero when none came). The Generation is passed by pointer here and
// below: these run on the answer's goroutine, whose stack must stay small
// for as long as the answer streams (Pipeline.Run).
func (q *query) connectAndPrefill(out Stream, g *Generation, first time.Time) error {
	f := &q.figs
	f.conn, f.retries, f.status = g.Conn, g.Retries, g.UpstreamStatus
	if err := q.span(out, ragtime.StageLLMConnect, g.RequestStart, g.GotConn, nil, f); err != nil {
		return err
	}
	written := g.WroteRequest
	if written.IsZero() {
		written = g.GotConn
	}
	end := first
	if end.IsZero() {
		end = q.now()
	}
	var prefill map[string]any // the figures', unless the server reported timings
	if len(g.ServerTimings) > 0 {
		prefill = prefillAttrs(g)
	}
	return q.span(out, ragtime.StageLLMPrefill, written, end, prefill, f)
}

func connAttrs(g *Generation) map[string]any {
	return addConnAttrs(make(map[string]any, 6), g.Conn, g.Retries)
}

// callAttrs adds the connection attrs of an embed or rerank call to attrs,
// when a call was made, and a cache's answer when there was one.
func callAttrs(c Call, attrs map[string]any) map[string]any {
	if c.Cache != "" {
		attrs["cache"] = c.Cache
	}
	if !c.Made {
		return attrs
	}
	attrs = addConnAttrs(attrs, c.Conn, c.Retries)
	if c.ServerWait > 0 {
		attrs["server_wait_ms"] = roundMs(c.ServerWait)
	}
	return attrs
}

// addConnAttrs adds a connection's attrs to attrs (connFigs).
func addConnAttrs(attrs map[string]any, c ragtime.ConnInfo, retries int) map[string]any {
	connFigs(&attrOut{m: attrs}, c, retries)
	return attrs
}

func prefillAttrs(g *Generation) map[string]any {
	attrs := make(map[string]any, len(g.ServerTimings)+1)
	for k, v := range g.ServerTimings {
		attrs[k] = v
	}
	if g.UpstreamStatus != 0 {
		attrs["status"] = g.UpstreamStatus
	}
	return attrs
}

// generationSpans turns the generator's observations into the llm_connect,
// llm_prefill and llm_decode stages, as far as they happened. When the
// first two were sent at the first token, it only completes their attrs
// (retries, server timings from the final chunk) for the record and the
// done event.
func (q *query) generationSpans(out Stream) error {
	g := q.gen
	if g.RequestStart.IsZero() {
		return nil
	}
	if q.earlySpans {
		for i := range q.spans {
			switch q.spans[i].Name {
			case ragtime.StageLLMConnect:
				q.spans[i].Attrs, q.figged = connAttrs(g), q.figged&^(1<<i)
			case ragtime.StageLLMPrefill:
				q.spans[i].Attrs, q.figged = prefillAttrs(g), q.figged&^(1<<i)
			}
		}
	} else {
		if g.GotConn.IsZero() {
			return q.span(out, ragtime.StageLLMConnect, g.RequestStart, q.now(), nil, nil)
		}
		if err := q.connectAndPrefill(out, g, g.FirstToken); err != nil || g.FirstToken.IsZero() {
			return err
		}
	}
	first := g.FirstToken
	if first.IsZero() {
		return nil
	}
	p50, p95, pmax := q.gaps.stats()
	last := g.LastToken
	if last.IsZero() {
		last = first
	}
	return q.span(out, ragtime.StageLLMDecode, first, last, map[string]any{
		"chunks":            g.Chunks,
		"completion_tokens": q.gen.Usage.CompletionTokens,
		"itl_p50_ms":        p50,
		"itl_p95_ms":        p95,
		"itl_max_ms":        pmax,
	}, nil)
}

// stageErr classifies err as the failure of stage: a cancelled context is
// a cancellation (the client went away), a passed deadline a timeout. An
// error that already is a cancellation of the client's own (the client
// went away while the stage wrote to it, not the context's) is kept as it
// is.
func stageErr(ctx context.Context, stage string, err error) error {
	if e := (*ragtime.Error)(nil); errors.As(err, &e) && e.Kind == ragtime.KindCancelled && !errors.Is(err, context.Canceled) {
		return AsError(stage, err)
	}
	if errors.Is(ctx.Err(), context.Canceled) || errors.Is(err, context.Canceled) {
		return &ragtime.Error{Stage: stage, Kind: ragtime.KindCancelled, Code: ragtime.CodeCancelled, Message: "the client went away", Err: err}
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		var e *ragtime.Error
		if errors.As(err, &e) {
			return AsError(stage, err) // the part's own timeout code (llm_timeout, ...)
		}
		return &ragtime.Error{Stage: stage, Kind: ragtime.KindTimeout, Code: ragtime.TimeoutCode(stage), Message: "the query's deadline passed during " + stage, Err: err}
	}
	return AsError(stage, err)
}

// finish derives the numbers, builds the record (q.rec), hands it to the
// Recorder and then writes done or error. The record is made here, at the
// end, rather than returned: a Record's 472 bytes in the caller's frame
// would be held on the answer's stack while it streams.
func (q *query) finish(ctx context.Context, out Stream, model string, runErr error) {
	cfg := q.p.cfg
	rec := ragtime.Record{
		QueryID: q.id, CreatedAt: q.t0.UTC(), TopK: q.req.TopK, RerankTopN: q.req.RerankTopN,
		MaxTokens: q.req.MaxTokens, MaxContextTokens: q.budget(), Retrieval: knownRetrieval(q.req.Retrieval),
		SweepID: q.req.SweepID, KeyID: q.req.KeyID,
		Model: model, Provider: cfg.Provider, Status: ragtime.StatusOK,
		Figures: ragtime.Figures{Usage: q.gen.Usage}, UpstreamStatus: q.gen.UpstreamStatus, RequestID: SafeRequestID(q.gen.RequestID),
		FinishReason: safeFinishReason(q.gen.FinishReason),
	}
	if q.gen.Model != "" {
		rec.Model = q.gen.Model
	}
	sum := sha256.Sum256([]byte(q.req.Question))
	rec.QuestionSHA256 = hex.EncodeToString(sum[:])
	if cfg.StoreQuestion {
		rec.Question = q.req.Question
	}
	if !q.gen.GotConn.IsZero() {
		reused := q.gen.Conn.Reused
		rec.ConnReused = &reused
	}
	for _, t := range [...]struct {
		key string
		dst **float64
	}{{ragtime.ServerQueueMs, &rec.ServerQueueMs}, {ragtime.ServerPrefillMs, &rec.ServerPrefillMs}, {ragtime.ServerLoadMs, &rec.ServerLoadMs}} {
		// An array, not a map literal: a map was made and hashed per ask.
		if v, ok := q.gen.ServerTimings[t.key]; ok {
			*t.dst = &v
		}
	}
	for _, s := range q.spans {
		switch s.Name {
		case ragtime.StageAccept:
			rec.AcceptMs += s.DurationMs
		case ragtime.StageQueue:
			rec.QueueMs += s.DurationMs
		case ragtime.StageEmbed, ragtime.StageSearch, ragtime.StageRerank, ragtime.StageAssemble:
			rec.RetrievalMs += s.DurationMs
		case ragtime.StageLLMConnect:
			rec.GenTTFTMs += s.DurationMs
		case ragtime.StageLLMPrefill:
			rec.GenTTFTMs += s.DurationMs
			rec.LLMPrefillMs = s.DurationMs
		}
	}
	rec.RetrievalMs = round3(rec.RetrievalMs)
	rec.GenTTFTMs = round3(rec.GenTTFTMs)
	if rec.ServerPrefillMs != nil {
		unexplained := round3(rec.LLMPrefillMs - *rec.ServerPrefillMs)
		rec.PrefillUnexplainedMs = &unexplained
	}
	if !q.firstAt.IsZero() {
		v := q.ms(q.firstAt)
		rec.FirstTokenMs = &v
	}
	if !q.answerAt.IsZero() {
		// llm_prefill ends at the first token of any kind, so the glue is
		// what the stages leave of first_token_ms; a reasoning model's
		// thinking before its first answer token is reasoning_ms, not glue.
		ttft := q.ms(q.answerAt)
		first := *rec.FirstTokenMs // set: an answer token is a first token
		overhead := round3(first - rec.AcceptMs - rec.QueueMs - rec.RetrievalMs - rec.GenTTFTMs)
		reasoning := round3(ttft - first)
		rec.TTFTMs, rec.OverheadMs, rec.ReasoningMs = &ttft, &overhead, &reasoning
		if ttft > 0 {
			rs, ps := rec.RetrievalMs/ttft, rec.LLMPrefillMs/ttft
			rec.RetrievalShare, rec.PrefillShare = &rs, &ps
		}
	}
	q.ttft.figures(&rec.Figures, rec.TTFTMs)
	for i := range q.spans {
		q.materialize(i)
	}
	rec.Stages = q.spans

	var perr *ragtime.Error
	var cause *Cancel
	switch {
	case runErr == nil:
	case errors.As(runErr, &cause) || errors.As(context.Cause(ctx), &cause):
		// Cancelled from outside for a stated reason: the client stalled,
		// the server shuts down.
		rec.Status, rec.ErrorCode, rec.ErrorMessage = ragtime.StatusCancelled, cause.Code, cause.Message
		if cause.Tell {
			perr = &ragtime.Error{Stage: AsError("", runErr).Stage, Kind: cause.Kind, Code: cause.Code, Message: cause.Message, Hint: cause.Hint}
		}
	case IsCancelled(runErr):
		perr = AsError("", runErr)
		rec.Status, rec.ErrorCode, rec.ErrorMessage = ragtime.StatusCancelled, ragtime.CodeCancelled, perr.Message
	default:
		perr = AsError("", runErr)
		rec.Status = ragtime.StatusError
		rec.ErrorCode, rec.ErrorMessage = perr.Code, perr.Message
		if perr.Status != 0 && rec.UpstreamStatus == 0 {
			rec.UpstreamStatus = perr.Status
		}
		if rec.RequestID == "" {
			rec.RequestID = SafeRequestID(perr.RequestID)
		}
	}
	rec.E2EMs = q.ms(q.now())
	if q.trace != nil {
		rec.TraceID = q.trace.TraceID()
	}
	// Record before done or error goes out: a client that saw done can
	// count on the record being at least queued (or spooled), even if the
	// process dies right after.
	if cfg.Recorder != nil {
		cfg.Recorder.Record(rec)
	}
	switch rec.Status {
	case ragtime.StatusOK:
		_ = out.Done(rec)
	case ragtime.StatusError:
		_ = out.Fail(perr)
	case ragtime.StatusCancelled:
		if perr != nil && cause != nil && cause.Tell {
			_ = out.Fail(perr)
		}
	}
	if q.trace != nil {
		// After the stream's last event: the trace's spans are built off
		// the request path.
		q.trace.End(rec, perr)
	}
	q.rec = &rec
}

// maxDeltaAtCap caps the room a query reserves for its deltas' gaps up
// front (0.5 KB); a longer answer grows it.
const maxDeltaAtCap = 128

// deltaGaps holds the gaps between consecutive deltas' arrivals, in
// nanoseconds, as uint32s: the one figure the arrivals are kept for is
// the inter-token latency (stats). A gap outside 0–4.29 s moves them all
// to wide, time.Durations.
type deltaGaps struct {
	n    int           // deltas seen
	last time.Duration // the last one's arrival since t0
	gaps []uint32
	wide []time.Duration
}

// add notes a delta's arrival at (since t0); reserve is the room to make
// for the gaps at the second one.
func (g *deltaGaps) add(at time.Duration, reserve int) {
	g.n++
	gap := at - g.last
	g.last = at
	if g.n == 1 {
		return
	}
	if g.wide == nil && gap >= 0 && gap <= math.MaxUint32 {
		if g.gaps == nil {
			g.gaps = make([]uint32, 0, reserve)
		}
		g.gaps = append(g.gaps, uint32(gap))
		return
	}
	if g.wide == nil {
		g.wide = make([]time.Duration, len(g.gaps), max(reserve, len(g.gaps)+1))
		for i, x := range g.gaps {
			g.wide[i] = time.Duration(x)
		}
		g.gaps = nil
	}
	g.wide = append(g.wide, gap)
}

// stats returns the p50, p95 and max gap, in milliseconds (nearest-rank
// percentiles; zeros with fewer than two deltas). It sorts the gaps: it
// is their last reader.
func (g *deltaGaps) stats() (p50, p95, pmax float64) {
	if g.wide != nil {
		return itlStats(g.wide)
	}
	if len(g.gaps) == 0 {
		return 0, 0, 0
	}
	return itlStats(g.gaps)
}

// itlStats returns the p50, p95 and max of gaps (nanoseconds, not empty),
// in milliseconds (nearest-rank percentiles), sorting them.
func itlStats[T uint32 | time.Duration](gaps []T) (p50, p95, pmax float64) {
	slices.Sort(gaps) // roundMs keeps the order: rounding after sorting picks the same gaps
	at := func(i int) float64 { return roundMs(time.Duration(gaps[i])) }
	return at(ragtime.NearestRankIndex(len(gaps), 0.50)), at(ragtime.NearestRankIndex(len(gaps), 0.95)), at(len(gaps) - 1)
}

// promptParts is what assemble produces.
type promptParts struct {
	messages      []Message
	sources       []Source
	contextTokens int
	promptTokens  int
	dropped       int
	// prefixTokens count the prompt before the retrieved context (system
	// prompt and history): what a server's prefix cache may hold.
	prefixTokens int
}

// Per-message framing tokens of the chat format (OpenAI's counting guide:
// about 3 per message plus 3 to prime the reply).
const (
	tokensPerMessage = 3
	tokensReplyPrime = 3
)

// assemble builds the prompt: system instructions first (stable, so a
// provider's prefix cache can reuse it), then the conversation's earlier
// messages (Request.History, which only grows from turn to turn), then one
// user message with the sources in rank order and the question last. It drops the lowest-ranked chunks that do not fit
// the context budget, and trims a lone first chunk that alone exceeds it.
func (q *query) assemble(hits []Hit) promptParts {
	cfg := q.p.cfg
	var parts promptParts
	// A kept source's block is its header ("[n] title\n") and its text; the
	// two are counted apart, each looked up in the memo (the same chunks
	// come back ask after ask; both end at a newline, where the tokenizer
	// splits anyway), and written into the user message without a string
	// of their own.
	texts := make([]string, 0, len(hits))
	parts.sources = make([]Source, 0, len(hits))
	var header []byte
	budget := q.budget()
	for i, h := range hits {
		header = appendSourceHeader(header[:0], len(texts)+1, h.Title)
		n := q.p.memo.CountBytes(header) + q.p.memo.Count(h.Text)
		if parts.contextTokens+n > budget {
			if len(texts) > 0 {
				parts.dropped = len(hits) - i
				break
			}
			h.Text = trimToTokens(cfg.Counter, h.Text, budget-cfg.Counter.Count(sourceBlock(1, h.Title, "")))
			n = cfg.Counter.Count(sourceBlock(1, h.Title, h.Text))
		}
		texts = append(texts, h.Text)
		parts.contextTokens += n
		parts.sources = append(parts.sources, Source{
			Rank: len(texts), ChunkID: h.ID, DocID: h.DocID, Title: h.Title,
			Score: h.Score, RerankScore: h.RerankScore, Legs: h.Legs, Text: h.Text,
		})
	}
	var user strings.Builder
	size := len("Request \n\nSources:\n\nQuestion: ") + len(q.req.PromptNonce) + len(noSources) + len(q.req.Question)
	for i, src := range parts.sources {
		size += len("[] \n\n\n") + len(strconv.Itoa(i+1)) + len(src.Title) + len(texts[i])
	}
	user.Grow(size) // once: the context is most of a prompt's bytes
	if q.req.PromptNonce != "" {
		// first, so nothing after the system prompt matches an earlier prompt
		user.WriteString("Request ")
		user.WriteString(q.req.PromptNonce)
		user.WriteString("\n\n")
	}
	user.WriteString("Sources:\n\n")
	for i, src := range parts.sources {
		header = appendSourceHeader(header[:0], i+1, src.Title)
		user.Write(header)
		user.WriteString(texts[i])
		user.WriteString("\n\n")
	}
	if len(texts) == 0 {
		user.WriteString(noSources)
		parts.contextTokens = q.p.memo.Count(noSources)
	}
	user.WriteString("Question: ")
	user.WriteString(q.req.Question)
	parts.messages = make([]Message, 0, 2+len(q.req.History))
	parts.messages = append(parts.messages, Message{Role: "system", Content: cfg.SystemPrompt})
	historyTokens := 0
	for _, m := range q.req.History {
		parts.messages = append(parts.messages, m)
		historyTokens += tokensPerMessage + cfg.Counter.Count(m.Content)
	}
	parts.messages = append(parts.messages, Message{Role: "user", Content: user.String()})
	parts.prefixTokens = tokensReplyPrime + 2*tokensPerMessage + q.p.systemTokens + historyTokens
	// The user message is counted from its parts, so the context is not
	// tokenized a second time.
	parts.promptTokens = tokensReplyPrime + 2*tokensPerMessage + q.p.systemTokens + historyTokens + q.p.frameTokens +
		parts.contextTokens + len(texts)*q.p.sepTokens + cfg.Counter.Count("Question: "+q.req.Question)
	return parts
}

// noSources stands in the user message for an empty context.
const noSources = "(no sources were found)\n\n"

// sourceBlock is source n's block in the user message: its header and text.
func sourceBlock(n int, title, text string) string {
	return string(appendSourceHeader(nil, n, title)) + text
}

// appendSourceHeader appends source n's header, "[n] title\n", to b.
func appendSourceHeader(b []byte, n int, title string) []byte {
	b = append(b, '[')
	b = strconv.AppendInt(b, int64(n), 10)
	b = append(b, "] "...)
	b = append(b, title...)
	return append(b, '\n')
}

// trimToTokens cuts text at a word boundary so that it counts at most limit
// tokens, by halving search over the word count.
func trimToTokens(c TokenCounter, text string, limit int) string {
	if limit <= 0 {
		return ""
	}
	words := strings.Fields(text)
	lo, hi := 0, len(words)
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if c.Count(strings.Join(words[:mid], " ")) <= limit {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return strings.Join(words[:lo], " ")
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
