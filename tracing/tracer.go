package tracing

import (
	"context"
	"math"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"ragtime"
	"ragtime/pipeline"
)

// Names of the spans that are not stages.
const (
	// RootSpan is each query's root span; its children are the stages.
	RootSpan = "query"
	// ChatOperation is the GenAI operation of the span that groups
	// llm_connect, llm_prefill and llm_decode, named "chat {model}".
	ChatOperation = "chat"
)

// Tracer sends one trace per query; it implements pipeline.Tracer. Its
// methods are safe for concurrent use; a nil *Tracer is tracing turned off
// (Hook returns nil, Stats zeros, Shutdown nothing).
type Tracer struct {
	provider *sdktrace.TracerProvider
	tracer   trace.Tracer
	exporter *countingExporter
	// llmAddress and llmPort are server.address and server.port of the
	// chat spans (SetLLMServer).
	llmAddress string
	llmPort    int
	// target is where the spans go (Setup's Resolve).
	target Target

	queue   chan ended
	stop    chan struct{}
	stopped chan struct{}
	once    sync.Once
	dropped atomic.Uint64
	built   atomic.Uint64
}

// ended is a finished query waiting for its spans.
type ended struct {
	q   *queryTrace
	rec ragtime.Record
	err *ragtime.Error
}

// Stats are the tracer's counters, for /metrics.
type Stats struct {
	// Queued: finished queries waiting for their spans to be built.
	Queued int
	// Traced: queries whose spans were handed to the span processor.
	Traced uint64
	// Dropped: queries whose spans were not built because the queue was
	// full (the receiver slower than the queries, or away).
	Dropped uint64
	// SpansExported and SpansFailed count the spans the exporter sent, and
	// those in batches it failed to send after its retries.
	SpansExported uint64
	SpansFailed   uint64
}

func newTracer(exp sdktrace.SpanExporter, res *resource.Resource, queue int) *Tracer {
	if queue <= 0 {
		queue = DefaultQueueSize
	}
	cexp := &countingExporter{SpanExporter: exp}
	// Blocking: the batcher never drops silently; when the receiver is
	// slow it holds back the builder goroutine, whose bounded queue then
	// counts what it cannot take. The request path never waits on either.
	bsp := sdktrace.NewBatchSpanProcessor(cexp, sdktrace.WithBlocking())
	tp := sdktrace.NewTracerProvider(sdktrace.WithResource(res), sdktrace.WithSpanProcessor(bsp),
		sdktrace.WithIDGenerator(idGenerator{}))
	t := &Tracer{provider: tp, tracer: tp.Tracer("ragtime/tracing"), exporter: cexp,
		queue: make(chan ended, queue), stop: make(chan struct{}), stopped: make(chan struct{})}
	go t.build()
	return t
}

// Hook is the Tracer as the pipeline's Tracer: nil when t is nil, so that a
// pipeline without tracing does not even make the call.
func (t *Tracer) Hook() pipeline.Tracer {
	if t == nil {
		return nil
	}
	return t
}

// SetLLMServer names the model server of the chat spans (server.address and
// server.port) from its base URL; ignored when it has no host.
func (t *Tracer) SetLLMServer(baseURL string) {
	if t == nil {
		return
	}
	t.llmAddress, t.llmPort = hostPort(baseURL)
}

// Target is where the traces go and which setting chose it; the zero
// Target when t is nil.
func (t *Tracer) Target() Target {
	if t == nil {
		return Target{}
	}
	return t.target
}

// Extract returns ctx carrying the caller's trace context from the W3C
// traceparent and tracestate headers (and baggage), when they are valid; the
// query's root span then becomes a child of the caller's span.
func (t *Tracer) Extract(ctx context.Context, h http.Header) context.Context {
	if t == nil {
		return ctx
	}
	return Propagator.Extract(ctx, propagation.HeaderCarrier(h))
}

// Stats reads the counters.
func (t *Tracer) Stats() Stats {
	if t == nil {
		return Stats{}
	}
	return Stats{Queued: len(t.queue), Traced: t.built.Load(), Dropped: t.dropped.Load(),
		SpansExported: t.exporter.exported.Load(), SpansFailed: t.exporter.failed.Load()}
}

// Shutdown builds the spans of the queries already queued, then flushes
// them to the receiver until ctx is done. Queries that end after it are
// counted as dropped.
func (t *Tracer) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	t.once.Do(func() { close(t.stop) })
	select {
	case <-t.stopped:
	case <-ctx.Done():
	}
	return t.provider.Shutdown(ctx)
}

// Start starts a query's root span at t0 (as stored: to the microsecond),
// as a child of the caller's span when ctx carries one.
func (t *Tracer) Start(ctx context.Context, t0 time.Time) (context.Context, pipeline.Trace) {
	ctx, root := t.tracer.Start(ctx, RootSpan, trace.WithTimestamp(storedTime(t0)), trace.WithSpanKind(trace.SpanKindServer))
	return ctx, &queryTrace{t: t, root: root, sc: root.SpanContext()}
}

// queryTrace is one query's trace. The pipeline calls Stage and Generation
// from the query's goroutine, End once, last.
type queryTrace struct {
	t    *Tracer
	root trace.Span
	sc   trace.SpanContext
	// stageIDs are the span ids given to the stages' calls before the
	// stages' spans exist; their spans are made with these ids.
	stageIDs []stageID
	chatID   trace.SpanID
	model    string
}

type stageID struct {
	name string
	id   trace.SpanID
}

// TraceID is the trace's id when it is recorded (sampled), else "".
func (q *queryTrace) TraceID() string {
	if !q.sc.IsSampled() {
		return ""
	}
	return q.sc.TraceID().String()
}

// Stage returns ctx carrying the span context of stage name's span, which is
// built when the query ends.
func (q *queryTrace) Stage(ctx context.Context, name string) context.Context {
	if !q.sc.IsSampled() {
		return ctx
	}
	id := newSpanID()
	q.stageIDs = append(q.stageIDs, stageID{name, id})
	return trace.ContextWithSpanContext(ctx, q.sc.WithSpanID(id))
}

// Generation returns ctx carrying the span context of the chat span that
// will group the generation stages, and notes the requested model.
func (q *queryTrace) Generation(ctx context.Context, model string) context.Context {
	q.model = model
	if !q.sc.IsSampled() {
		return ctx
	}
	q.chatID = newSpanID()
	return trace.ContextWithSpanContext(ctx, q.sc.WithSpanID(q.chatID))
}

// End queues the finished query for its spans; never blocks.
func (q *queryTrace) End(rec ragtime.Record, err *ragtime.Error) {
	if !q.root.IsRecording() {
		return
	}
	select {
	case <-q.t.stop:
		q.t.dropped.Add(1)
		return
	default:
	}
	select {
	case q.t.queue <- ended{q: q, rec: rec, err: err}:
	default:
		q.t.dropped.Add(1)
	}
}

// build turns finished queries into spans until Shutdown, then builds what
// is still queued.
func (t *Tracer) build() {
	defer close(t.stopped)
	for {
		select {
		case e := <-t.queue:
			t.spans(e)
		case <-t.stop:
			for {
				select {
				case e := <-t.queue:
					t.spans(e)
				default:
					return
				}
			}
		}
	}
}

// storedTime is at as Postgres stores it: truncated to the microsecond.
func storedTime(at time.Time) time.Time { return at.Truncate(time.Microsecond) }

// msDuration turns milliseconds with microsecond resolution (as the
// pipeline rounds them) into a Duration of whole microseconds.
func msDuration(ms float64) time.Duration {
	return time.Duration(math.Round(ms*1000)) * time.Microsecond
}

// spans builds a finished query's spans from its record: each stage at t0 +
// start_ms for duration_ms, the generation stages under a chat span, then
// ends the root at t0 + e2e_ms.
func (t *Tracer) spans(e ended) {
	q, rec := e.q, e.rec
	t0 := storedTime(rec.CreatedAt)
	rootCtx := trace.ContextWithSpan(context.Background(), q.root)
	failed := ""
	if e.err != nil && rec.Status == ragtime.StatusError {
		failed = e.err.Stage
	}

	chatCtx, chat, chatEnd := rootCtx, trace.Span(nil), time.Time{}
	if start, end, ok := generationBounds(rec.Stages); ok && q.chatID.IsValid() {
		model := q.model
		if model == "" {
			model = rec.Model
		}
		chatCtx, chat = t.tracer.Start(withSpanID(rootCtx, q.chatID), ChatOperation+" "+model,
			trace.WithTimestamp(t0.Add(start)), trace.WithSpanKind(trace.SpanKindClient),
			trace.WithAttributes(t.chatAttrs(rec, model)...))
		if failed == ragtime.StageLLMConnect || failed == ragtime.StageLLMPrefill || failed == ragtime.StageLLMDecode {
			setError(chat, e.err)
		}
		chatEnd = t0.Add(end)
	}

	for _, s := range rec.Stages {
		parent := rootCtx
		if isGeneration(s.Name) {
			parent = chatCtx
		}
		if id, ok := q.presetID(s.Name); ok {
			parent = withSpanID(parent, id)
		}
		start := t0.Add(msDuration(s.StartMs))
		_, span := t.tracer.Start(parent, s.Name, trace.WithTimestamp(start),
			trace.WithAttributes(stageAttrs(s, rec)...))
		if s.Name == failed {
			setError(span, e.err)
		}
		span.End(trace.WithTimestamp(start.Add(msDuration(s.DurationMs))))
	}
	if chat != nil {
		chat.End(trace.WithTimestamp(chatEnd))
	}

	q.root.SetAttributes(rootAttrs(rec)...)
	switch {
	case rec.Status == ragtime.StatusError && e.err != nil:
		setError(q.root, e.err)
	case rec.Status == ragtime.StatusError:
		setError(q.root, &ragtime.Error{Code: rec.ErrorCode, Message: rec.ErrorMessage})
	}
	q.root.End(trace.WithTimestamp(t0.Add(msDuration(rec.E2EMs))))
	t.built.Add(1)
}

// presetID is the span id the stage's calls carried, if it had one.
func (q *queryTrace) presetID(name string) (trace.SpanID, bool) {
	for _, s := range q.stageIDs {
		if s.name == name {
			return s.id, true
		}
	}
	return trace.SpanID{}, false
}

func isGeneration(name string) bool {
	return name == ragtime.StageLLMConnect || name == ragtime.StageLLMPrefill || name == ragtime.StageLLMDecode
}

// generationBounds is the start of the first generation stage and the end of
// the last, relative to t0.
func generationBounds(stages []ragtime.Span) (start, end time.Duration, ok bool) {
	for _, s := range stages {
		if !isGeneration(s.Name) {
			continue
		}
		b, e := msDuration(s.StartMs), msDuration(s.StartMs)+msDuration(s.DurationMs)
		if !ok || b < start {
			start = b
		}
		if !ok || e > end {
			end = e
		}
		ok = true
	}
	return start, end, ok
}

// countingExporter counts what the exporter sent and failed to send.
type countingExporter struct {
	sdktrace.SpanExporter
	exported, failed atomic.Uint64
}

func (c *countingExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	err := c.SpanExporter.ExportSpans(ctx, spans)
	if err != nil {
		c.failed.Add(uint64(len(spans)))
	} else {
		c.exported.Add(uint64(len(spans)))
	}
	return err
}
