package pipeline

import "time"

// Stage names, in pipeline order (DESIGN.md's measurement contract).
const (
	StageQueue      = "queue"
	StageEmbed      = "embed"
	StageSearch     = "search"
	StageRerank     = "rerank"
	StageAssemble   = "assemble"
	StageLLMConnect = "llm_connect"
	StageLLMPrefill = "llm_prefill"
	StageLLMDecode  = "llm_decode"
)

// Keys of Generation.ServerTimings and of the llm_prefill attrs, for the
// timings a model server reports about itself, in milliseconds.
const (
	ServerQueueMs   = "server_queue_ms"
	ServerPrefillMs = "server_prefill_ms"
	ServerLoadMs    = "server_load_ms"
	ServerDecodeMs  = "server_decode_ms"
)

// Query statuses as stored.
const (
	StatusOK        = "ok"
	StatusError     = "error"
	StatusCancelled = "cancelled"
)

// Span is one finished stage on the query's clock. Milliseconds are relative
// to t0 and rounded to the microsecond.
type Span struct {
	Name       string         `json:"name"`
	Seq        int            `json:"seq"`
	StartMs    float64        `json:"start_ms"`
	DurationMs float64        `json:"duration_ms"`
	Attrs      map[string]any `json:"attrs,omitempty"`
}

// Record is one finished query: what the done event carries and what is
// stored. Fields that depend on a first token (TTFTMs and what derives from
// it) are nil when no answer token was flushed.
type Record struct {
	QueryID   string    `json:"query_id"`
	CreatedAt time.Time `json:"created_at"`
	// Question is empty when questions are stored as hashes only.
	Question       string `json:"question,omitempty"`
	QuestionSHA256 string `json:"question_sha256"`
	TopK           int    `json:"top_k"`
	RerankTopN     int    `json:"rerank_top_n"`
	MaxTokens      int    `json:"max_tokens"`
	// MaxContextTokens is the context budget the prompt was assembled
	// under; 0 when unknown.
	MaxContextTokens int `json:"max_context_tokens,omitempty"`
	// SweepID is the sweep that made the query; empty for ordinary queries.
	SweepID      string `json:"sweep_id,omitempty"`
	Model        string `json:"model"`
	Provider     string `json:"provider"`
	Status       string `json:"status"`
	ErrorCode    string `json:"error_code,omitempty"`
	ErrorMessage string `json:"error_message,omitempty"`

	TTFTMs       *float64 `json:"ttft_ms"`
	FirstTokenMs *float64 `json:"first_token_ms"`
	E2EMs        float64  `json:"e2e_ms"`
	QueueMs      float64  `json:"queue_ms"`
	RetrievalMs  float64  `json:"retrieval_ms"`
	GenTTFTMs    float64  `json:"gen_ttft_ms"`
	LLMPrefillMs float64  `json:"llm_prefill_ms"`
	OverheadMs   *float64 `json:"overhead_ms"`
	// ReasoningMs is first_token_ms → ttft_ms: how long the model thought
	// before its first answer token (0 for a model that does not reason).
	ReasoningMs    *float64 `json:"reasoning_ms"`
	RetrievalShare *float64 `json:"retrieval_share"`
	PrefillShare   *float64 `json:"prefill_share"`

	Usage          Usage  `json:"usage"`
	ConnReused     *bool  `json:"conn_reused,omitempty"`
	UpstreamStatus int    `json:"upstream_status,omitempty"`
	RequestID      string `json:"request_id,omitempty"`

	// Server-side timings, in milliseconds, when the model server reported
	// them (Ollama, llama.cpp, vLLM, Groq); nil otherwise.
	ServerQueueMs   *float64 `json:"server_queue_ms,omitempty"`
	ServerPrefillMs *float64 `json:"server_prefill_ms,omitempty"`
	ServerLoadMs    *float64 `json:"server_load_ms,omitempty"`

	Stages []Span `json:"stages"`
}
