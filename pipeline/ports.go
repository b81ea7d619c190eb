package pipeline

import (
	"context"
	"time"

	"ragtime"
)

// Embedder turns texts into vectors.
//
// Contract: it returns exactly one vector per input text, in input order, all
// of the same dimension; it must not keep or modify the input slice; it is
// safe for concurrent use; it honours ctx cancellation.
type Embedder interface {
	Embed(ctx context.Context, texts []string) ([][]float32, error)
}

// Searcher finds the chunks nearest to a query vector.
//
// Contract: it returns at most k hits, best first, each with Score set to the
// similarity (higher is better; cosine for the built-in stores); an empty
// index yields no hits and no error; it is safe for concurrent use, including
// while documents are being ingested. A hit's Chunk.Metadata may be the
// store's own map, shared by every search that finds the chunk: callers
// read it and never modify it (the pipeline does not read it at all), so
// an ask does not pay a copy per hit.
type Searcher interface {
	Search(ctx context.Context, query []float32, k int, filter Filter) ([]Hit, error)
}

// LexicalSearcher finds the chunks whose words best match a question: the
// lexical leg of a hybrid retrieval (BM25 over the whole corpus, in the
// embedded store).
//
// Contract: as Searcher's, with the question's text in place of its
// vector and Score the leg's own score (BM25: higher is better, not
// bounded); a question without a searchable word yields no hits and no
// error. LexicalName names the leg in stage attrs.
type LexicalSearcher interface {
	SearchText(ctx context.Context, question string, k int, filter Filter) ([]Hit, error)
	LexicalName() string
}

// HybridSearcher is a Searcher whose store holds the lexical leg itself
// (Qdrant: a sparse vector in the same collection), so a hybrid retrieval
// is one call to it, with the legs and (for the fusions it can run) their
// fusion inside the store. The pipeline uses it when Config.Lexical is nil.
//
// Contract: SearchLegs returns each leg's own hits best first, Score the
// leg's score (Vector up to q.VectorK in a hybrid, Lexical up to
// q.LexicalK), and, when the store fused them (q.Fusion is one it runs),
// Fused: the fused top q.K, Score the fused score. LexicalName names the
// leg in stage attrs. LexicalMissing says, without a call to the store,
// why the data it searches has no lexical leg (a collection created before
// it had one), naming the fix; nil when it has one or it is not known yet.
type HybridSearcher interface {
	Searcher
	SearchLegs(ctx context.Context, q LegsQuery) (LegsResult, error)
	LexicalName() string
	LexicalMissing() error
}

// LegsQuery is a hybrid or lexical retrieval as a HybridSearcher runs it.
type LegsQuery struct {
	// Retrieval is RetrievalHybrid or RetrievalLexical.
	Retrieval string
	// Vector is the question's vector (nil in a lexical retrieval).
	Vector   []float32
	Question string
	// K is top_k; VectorK and LexicalK are the legs' depths.
	K, VectorK, LexicalK int
	Filter               Filter
	Fusion               Fusion
}

// LegsResult is what a HybridSearcher found.
type LegsResult struct {
	// Fused is the store's fusion of the legs, nil when it did not fuse.
	Fused           []Hit
	Vector, Lexical []Hit
}

// InProcessSearcher is a Searcher whose search waits on nothing outside the
// process (the embedded index): the pipeline sends the events held before
// it with the next flush instead of flushing them before it, as it does
// before every wait outside the process.
type InProcessSearcher interface {
	Searcher
	SearchesInProcess() bool
}

// Reranker reorders search hits by their relevance to the question.
//
// Contract: it returns at most topN of the given hits (topN ≥ 1), best first,
// with RerankScore set; it never invents hits and leaves Score untouched; the
// input slice may be reordered but not resized.
type Reranker interface {
	Rerank(ctx context.Context, question string, hits []Hit, topN int) ([]Hit, error)
}

// Generator streams an answer.
//
// Contract: it calls emit once per non-empty delta, in order, from the calling
// goroutine, with Delta.At set to the moment the delta was received from the
// model (and, on the first, Delta.Timing set to the timings so far); if emit returns an error it stops, cancels the upstream call and
// returns that error. It fills gen (the caller's, overwritten whole) with
// the timings it observed, even on failure (zero times for what did not
// happen). A cancelled ctx yields an error that
// wraps ctx.Err(), never a nil error with a partial answer. Failures it can
// classify are returned as *Error with a stable Code and a Hint. It does
// not change req.
//
// The request and the Generation go by pointer: the caller's goroutine
// parks in Generate for as long as the answer streams, and the two by
// value took some 700 bytes of that goroutine's stack in the caller's and
// the generator's frames (make bench-streams; Pipeline.Begin).
type Generator interface {
	Generate(ctx context.Context, req *GenerateRequest, emit func(Delta) error, gen *Generation) error
}

// Prewarmer is a Generator that can open its upstream connection ahead of
// the call: the pipeline calls Prewarm when retrieval starts, so that the
// connection is dialled while retrieval runs instead of after it.
//
// Contract: Prewarm returns at once (the dial runs in the background), does
// nothing when a connection is already at hand, and is safe for concurrent
// use.
type Prewarmer interface {
	Prewarm(ctx context.Context)
}

// TokenCounter counts the tokens a model would see in a text.
//
// Contract: deterministic, safe for concurrent use, Count("") == 0.
type TokenCounter interface {
	Count(text string) int
}

// Stream receives one query's events as they happen; the SSE writer in api/
// implements it, and so does anything that runs the pipeline without HTTP.
//
// Contract: each method writes (and, for a network stream, flushes) its event
// before returning — except that a Stream which is also a Flusher may hold
// Meta, Stage and Sources events, and a Delta whose More is set, until its
// Flush or the next event it sends without holding (a Delta without More,
// Done, Fail); a returned error means the client is gone and the pipeline
// stops with status cancelled. A span's attrs are not changed after Stage
// (a span that changes gets a new map; the figures an unrecorded span's
// attrs are framed from are written once, before it is sent): a Stream may
// keep the span and frame its event again later, as the SSE writer does
// for a resume. Attrs is nil on such a span until the record is made;
// frame it with StageSpan.AppendJSON or encoding/json, or take its map
// with Recorded.
type Stream interface {
	Meta(m Meta) error
	Stage(s StageSpan) error
	Sources(sources []Source) error
	Delta(d Delta) error
	Done(rec ragtime.Record) error
	Fail(e *ragtime.Error) error
}

// Flusher is a Stream that holds events (see Stream) and sends them on
// Flush. The pipeline flushes before it waits on anything outside the
// process — the embedder, the search, a reranker, the model — and after the
// spans that follow the first token, so the events of a burst go out in one
// network write and none waits on the query's slow parts.
type Flusher interface {
	Flush() error
}

// flush sends the events out holds, if it holds any.
func flush(out Stream) error {
	if f, ok := out.(Flusher); ok {
		return f.Flush()
	}
	return nil
}

// Chunk is a piece of a document as it is stored in an index.
type Chunk struct {
	ID       string            `json:"chunk_id"`
	DocID    string            `json:"doc_id"`
	Title    string            `json:"title"`
	Index    int               `json:"chunk"`
	Text     string            `json:"text"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

// Hit is a chunk found by a search, with its scores.
type Hit struct {
	Chunk
	// Score is the search similarity (higher is better).
	Score float64
	// RerankScore is set by a Reranker; nil when no reranking happened.
	RerankScore *float64
	// Legs are the hit's ranks and scores in each leg of the retrieval
	// that found it.
	Legs
}

// Legs are a hit's 1-based ranks and scores in the vector and lexical
// legs; nil for a leg that did not find it (or did not run).
type Legs struct {
	VectorRank   *int     `json:"vector_rank"`
	VectorScore  *float64 `json:"vector_score"`
	LexicalRank  *int     `json:"lexical_rank"`
	LexicalScore *float64 `json:"lexical_score"`
}

// Filter narrows a search. The zero value matches everything.
type Filter struct {
	// DocIDs, when not empty, keeps only chunks of these documents.
	DocIDs []string `json:"doc_id,omitempty"`
	// Metadata keeps only chunks whose metadata has every key = value.
	Metadata map[string]string `json:"metadata,omitempty"`
}

// Message is one chat message of a prompt.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// GenerateRequest is what a Generator is asked.
type GenerateRequest struct {
	// Model overrides the generator's configured model when not empty.
	Model string
	// Messages is the prompt: the stable system part first, then the
	// conversation's earlier messages (Request.History), then one user
	// message with the retrieved context in rank order and the question.
	Messages []Message
	// MaxTokens bounds the answer.
	MaxTokens int
	// Temperature, when set, is the sampling temperature to send.
	Temperature *float64
	// Stop are the sequences at which the model is to stop, none of them
	// part of the answer; Seed, when set, asks for repeatable sampling.
	Stop []string
	Seed *int64
	// Question is the user's question, verbatim.
	Question string
	// Sources are the chunks in the context, in rank order; source n (1-based)
	// is cited as [n].
	Sources []Source
}

// Delta is one piece of streamed output.
type Delta struct {
	Text string `json:"text"`
	// Reasoning marks thinking output (shown apart, or hidden).
	Reasoning bool `json:"-"`
	// At is when the generator received the delta from the model.
	At time.Time `json:"-"`
	// More is set by a generator when the delta after this one is already in
	// hand: received and parsed, so nothing outside the process is waited on
	// before it is emitted. A Flusher stream may then hold this delta and send
	// it with the next in one network write (the deltas of one upstream read
	// go out in one client write). The pipeline never holds a query's first
	// delta or its first answer delta: TTFT is when they were sent. A
	// generator that cannot tell leaves it false.
	More bool `json:"-"`
	// Timing, on a generation's first delta only, is what the generator has
	// observed so far (RequestStart, GotConn, WroteRequest, Conn,
	// UpstreamStatus), so the pipeline can send llm_connect and llm_prefill
	// as soon as the first token is out instead of after the last. Nil on
	// later deltas and from generators that do not set it.
	Timing *Generation `json:"-"`
}

// Generation is what a Generator observed of one call. Times are wall-clock
// readings carrying Go's monotonic clock; zero means it did not happen.
type Generation struct {
	Provider string
	Model    string
	// RequestStart is when the upstream call began (before any connection).
	RequestStart time.Time
	// GotConn is when a connection was obtained (new or reused).
	GotConn time.Time
	// WroteRequest is when the request was fully written.
	WroteRequest time.Time
	// FirstToken and LastToken bound the streamed deltas of any kind.
	FirstToken time.Time
	LastToken  time.Time
	// Conn describes the connection.
	Conn ragtime.ConnInfo
	// Usage as the provider reported it (or as counted locally).
	Usage ragtime.Usage
	// Chunks counts the streamed deltas.
	Chunks int
	// ServerTimings are the server's own figures in milliseconds, when it
	// reports them (keys such as server_queue_ms, server_prefill_ms).
	ServerTimings map[string]float64
	// UpstreamStatus is the HTTP status of the upstream response, 0 if none.
	UpstreamStatus int
	// RequestID is the upstream's request id, when it sent one.
	RequestID string
	// FinishReason is why the model stopped, in the provider's words (stop,
	// length, end_turn, ...); empty when it did not say.
	FinishReason string
	// Retries counts the attempts made before the one that answered (or
	// failed last); their time, backoff included, is part of llm_connect.
	Retries int
}

// Call is what an embedder or reranker observed of its HTTP call to an
// upstream server (the last attempt's connection, and how many attempts
// were retried), for the stage's attrs. The pipeline puts one in the
// context with WithCall; an implementation without HTTP ignores it.
type Call struct {
	// Made is set once a call was sent.
	Made    bool
	Conn    ragtime.ConnInfo
	Retries int
	// ServerWait is from the request fully written to the first response
	// byte read: the server's time, the network's and, under CPU
	// contention, the wait before ragtime's reader ran. The rest of the
	// stage is ragtime's (encoding, connection, reading and decoding).
	ServerWait time.Duration
	// Cache is set by a caching embedder: CacheHit when every text came
	// from its cache (no call was made), CacheMiss when it called the
	// embedder; empty without a cache.
	Cache string
}

// The values of Call.Cache (the embed stage's cache attr).
const (
	CacheHit  = "hit"
	CacheMiss = "miss"
)

type callKey struct{}

// WithCall returns ctx carrying c, which the stage's implementation fills.
func WithCall(ctx context.Context, c *Call) context.Context {
	return context.WithValue(ctx, callKey{}, c)
}

// CallFrom returns the Call carried by ctx, or nil. Callers fill it from
// one goroutine (one call after another).
func CallFrom(ctx context.Context) *Call {
	c, _ := ctx.Value(callKey{}).(*Call)
	return c
}

// Source is a chunk as it is shown to the client, with its rank in the
// context (1-based; citations [n] refer to it).
type Source struct {
	Rank        int      `json:"rank"`
	ChunkID     string   `json:"chunk_id"`
	DocID       string   `json:"doc_id"`
	Title       string   `json:"title"`
	Score       float64  `json:"score"`
	RerankScore *float64 `json:"rerank_score"`
	Legs
	Text string `json:"text"`
}

// Meta is the first event of a stream.
type Meta struct {
	QueryID    string `json:"query_id"`
	Model      string `json:"model"`
	Provider   string `json:"provider"`
	TopK       int    `json:"top_k"`
	RerankTopN int    `json:"rerank_top_n"`
	MaxTokens  int    `json:"max_tokens"`
	// MaxContextTokens is the token budget for the retrieved context.
	MaxContextTokens int    `json:"max_context_tokens"`
	Embedder         string `json:"embedder"`
	Store            string `json:"store"`
	Reranker         string `json:"reranker"`
	// Retrieval is the legs the search ran: hybrid, vector or lexical.
	Retrieval string `json:"retrieval,omitempty"`
	// RerankNote says why the context keeps fewer chunks than top_k when
	// the request left rerank_top_n to its default.
	RerankNote string `json:"rerank_note,omitempty"`
	// TTFTBudgetMs is the ask's TTFT budget (0: none).
	TTFTBudgetMs int `json:"ttft_budget_ms,omitempty"`
}

// Tracer follows each query in a distributed trace (tracing.Tracer does it
// with OpenTelemetry). A nil Tracer in Config costs nothing.
//
// Contract: Start runs on the request path, once per query, at t0 (the
// query's start on its clock), and must be cheap and never block; the
// context it returns carries the trace to the stages' calls. It is safe for
// concurrent use.
type Tracer interface {
	Start(ctx context.Context, t0 time.Time) (context.Context, Trace)
}

// Trace is one query's trace, as its Tracer started it.
//
// Contract: TraceID is the id stored with the query ("" when the trace is
// not recorded); Stage and Generation return the context that a stage's
// calls, or the generator's call, run in, so that embedders, stores,
// rerankers and models carry the stage's span onward (Generation also
// takes the model requested); End takes the finished
// record (and its failure, nil when it succeeded or was cancelled without a
// word to the client) after the stream has ended, and must not block: its
// spans are built from the record's stages, on the query's clock, off the
// request path.
type Trace interface {
	TraceID() string
	Stage(ctx context.Context, name string) context.Context
	Generation(ctx context.Context, model string) context.Context
	End(rec ragtime.Record, err *ragtime.Error)
}
