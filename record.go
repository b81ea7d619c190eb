package ragtime

import "time"

// Keys of Generation.ServerTimings and of the llm_prefill attrs, for the
// timings a model server reports about itself, in milliseconds.
const (
	ServerQueueMs   = "server_queue_ms"
	ServerPrefillMs = "server_prefill_ms"
	ServerLoadMs    = "server_load_ms"
	ServerDecodeMs  = "server_decode_ms"
)

// Retrieval modes: the legs a search runs.
const (
	RetrievalHybrid  = "hybrid"
	RetrievalVector  = "vector"
	RetrievalLexical = "lexical"
)

// Recorder stores finished queries.
//
// Contract: Record must not block on storage (the request path never waits on
// the database); what it cannot keep it counts. It is safe for concurrent use.
type Recorder interface {
	Record(rec Record)
}

// ConnInfo describes the connection an upstream HTTP call used.
type ConnInfo struct {
	Reused  bool
	DNS     time.Duration
	Connect time.Duration
	TLS     time.Duration
	// FreshRetry: a reused keep-alive connection failed before any
	// response byte (the server had closed it), and the request was sent
	// again on a new connection, which is the one described.
	FreshRetry bool
	// Prewarmed: the connection was dialled ahead of the call, while
	// retrieval ran (pipeline.Prewarmer); Prewarm is what that dial took, off the
	// critical path (Connect and DNS are then 0: nothing was dialled on it).
	Prewarmed bool
	Prewarm   time.Duration
}

// Span is one finished stage on the query's clock. Milliseconds are relative
// to t0 and rounded to the microsecond. A stored record's spans carry their
// attrs in Attrs.
type Span struct {
	Name       string         `json:"name"`
	Seq        int            `json:"seq"`
	StartMs    float64        `json:"start_ms"`
	DurationMs float64        `json:"duration_ms"`
	Attrs      map[string]any `json:"attrs,omitempty"`
}

// Record is one finished query: what is stored, and what GET
// /v1/queries/{id} answers. Fields that depend on a first token (TTFTMs and
// what derives from it) are nil when no answer token was flushed.
//
// The record's shape is declared here once: the JSON tags name its fields
// for the API, the db tags its columns in the queries table (postgres derives
// its insert and select from them; options: "null" stores a zero value as
// NULL and reads NULL as zero, "uuid" is a uuid column), and Figures is what
// the done event carries too. A new field needs this type and a migration
// adding its column, nothing else; TestEveryRecordFieldIsStored (postgres)
// and TestDoneEventCarriesEveryFigure (api) fail if it does not reach the
// row, the API or the stream.
type Record struct {
	QueryID   string    `json:"query_id" db:"id,uuid"`
	CreatedAt time.Time `json:"created_at" db:"created_at"`
	// Question is empty when questions are stored as hashes only.
	Question       string `json:"question,omitempty" db:"question,null"`
	QuestionSHA256 string `json:"question_sha256" db:"question_sha256"`
	TopK           int    `json:"top_k" db:"top_k"`
	RerankTopN     int    `json:"rerank_top_n" db:"rerank_top_n"`
	MaxTokens      int    `json:"max_tokens" db:"max_tokens"`
	// MaxContextTokens is the context budget the prompt was assembled
	// under; 0 when unknown.
	MaxContextTokens int `json:"max_context_tokens,omitempty" db:"max_context_tokens,null"`
	// Retrieval is the retrieval mode the search ran (RetrievalHybrid,
	// RetrievalVector or RetrievalLexical); empty when the request never
	// reached a known one.
	Retrieval string `json:"retrieval,omitempty" db:"retrieval,null"`
	// SweepID is the sweep that made the query; empty for ordinary queries.
	SweepID string `json:"sweep_id,omitempty" db:"sweep_id,uuid,null"`
	// KeyID is the API key the query was asked with; empty without one.
	KeyID        string `json:"key_id,omitempty" db:"key_id,uuid,null"`
	Model        string `json:"model" db:"model"`
	Provider     string `json:"provider" db:"provider"`
	Status       string `json:"status" db:"status"`
	ErrorCode    string `json:"error_code,omitempty" db:"error_code,null"`
	ErrorMessage string `json:"error_message,omitempty" db:"error_message,null"`

	Figures

	ConnReused     *bool  `json:"conn_reused,omitempty" db:"conn_reused"`
	UpstreamStatus int    `json:"upstream_status,omitempty" db:"upstream_status,null"`
	RequestID      string `json:"request_id,omitempty" db:"request_id,null"`
	// FinishReason is why the model stopped, as the provider said it
	// (stop, length, end_turn, ...); empty when it did not say.
	FinishReason string `json:"finish_reason,omitempty" db:"finish_reason,null"`
	// TraceID is the query's OpenTelemetry trace id (32 hex digits) when it
	// was traced and sampled; empty otherwise.
	TraceID string `json:"trace_id,omitempty" db:"trace_id,null"`

	// Server-side timings, in milliseconds, when the model server reported
	// them (Ollama, llama.cpp, vLLM, Groq); nil otherwise.
	ServerQueueMs   *float64 `json:"server_queue_ms,omitempty" db:"server_queue_ms"`
	ServerPrefillMs *float64 `json:"server_prefill_ms,omitempty" db:"server_prefill_ms"`
	ServerLoadMs    *float64 `json:"server_load_ms,omitempty" db:"server_load_ms"`

	// Stages are stored as rows of query_stages, not as columns.
	Stages []Span `json:"stages" db:"-"`
}

// Figures are what a finished query measured: the numbers the done event
// reports, stored with the record.
type Figures struct {
	TTFTMs       *float64 `json:"ttft_ms" db:"ttft_ms"`
	FirstTokenMs *float64 `json:"first_token_ms" db:"first_token_ms"`
	E2EMs        float64  `json:"e2e_ms" db:"e2e_ms"`
	// AcceptMs is the accept stage: the request's arrival (its first byte
	// at the socket) → the pipeline's start (0 when run in-process).
	AcceptMs     float64  `json:"accept_ms" db:"accept_ms"`
	QueueMs      float64  `json:"queue_ms" db:"queue_ms"`
	RetrievalMs  float64  `json:"retrieval_ms" db:"retrieval_ms"`
	GenTTFTMs    float64  `json:"gen_ttft_ms" db:"gen_ttft_ms"`
	LLMPrefillMs float64  `json:"llm_prefill_ms" db:"llm_prefill_ms"`
	OverheadMs   *float64 `json:"overhead_ms" db:"overhead_ms"`
	// ReasoningMs is first_token_ms → ttft_ms: how long the model thought
	// before its first answer token (0 for a model that does not reason).
	ReasoningMs    *float64 `json:"reasoning_ms" db:"reasoning_ms"`
	RetrievalShare *float64 `json:"retrieval_share" db:"retrieval_share"`
	PrefillShare   *float64 `json:"prefill_share" db:"prefill_share"`
	// PrefillUnexplainedMs is llm_prefill_ms − the server's own prefill
	// (server_prefill_ms): the time before the server's prefill — its queue,
	// tokenizing and templating the prompt, the network — which grows with
	// the prompt and under contention. Nil when the server reports no
	// prefill.
	PrefillUnexplainedMs *float64 `json:"prefill_unexplained_ms" db:"prefill_unexplained_ms"`

	// The TTFT budget's account, when the ask had one (nil and empty
	// otherwise): the budget, the TTFT and llm_prefill predicted for the
	// prompt sent (nil without a prefill model), the ranked chunks
	// dropped to fit it, and the outcome (pipeline.BudgetHeld, BudgetMissed,
	// BudgetUnmodelled).
	TTFTBudgetMs       *float64 `json:"ttft_budget_ms,omitempty" db:"ttft_budget_ms"`
	PredictedTTFTMs    *float64 `json:"predicted_ttft_ms,omitempty" db:"predicted_ttft_ms"`
	PredictedPrefillMs *float64 `json:"predicted_prefill_ms,omitempty" db:"predicted_prefill_ms"`
	BudgetDropped      *int     `json:"budget_dropped,omitempty" db:"budget_dropped"`
	BudgetOutcome      string   `json:"budget_outcome,omitempty" db:"budget_outcome,null"`

	Usage Usage `json:"usage"`
}

// Usage counts tokens.
type Usage struct {
	PromptTokens     int `json:"prompt_tokens" db:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens" db:"completion_tokens"`
	// CachedTokens are the prompt tokens the provider served from its
	// prefix cache; nil when it does not say (Ollama reuses its cache but
	// reports nothing): unknown, not 0.
	CachedTokens    *int `json:"cached_tokens" db:"cached_tokens"`
	ReasoningTokens int  `json:"reasoning_tokens" db:"reasoning_tokens"`
	// CacheCreationTokens are prompt tokens written to the provider's
	// prefix cache (Anthropic's cache_creation_input_tokens).
	CacheCreationTokens int `json:"cache_creation_tokens,omitempty" db:"cache_creation_tokens"`
}

// DoneEvent is the done event's body: the record's Figures and Stages,
// without what the client sent itself or what only storage needs.
type DoneEvent struct {
	QueryID string `json:"query_id"`
	Model   string `json:"model"`
	Figures
	Stages []Span `json:"stages"`
}

// DoneEvent returns the done event of the record.
func (r Record) DoneEvent() DoneEvent {
	return DoneEvent{QueryID: r.QueryID, Model: r.Model, Figures: r.Figures, Stages: r.Stages}
}
