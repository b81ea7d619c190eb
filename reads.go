package ragtime

import (
	"errors"
	"time"
)

// The read side of the domain: stored queries as the API and the dashboards
// read them back, the recorder's counters and the documents of a store.
// Adapters (postgres, the vector stores) return these types and errors, and
// the API maps the errors to HTTP statuses, without importing the adapters.

// ErrNotFound is returned for a query id that is not stored, including one
// that is not a UUID at all.
var ErrNotFound = errors.New("query not found")

// ErrInvalidCursor is returned by a query lister for a cursor it did not make.
var ErrInvalidCursor = errors.New("cursor is not one this server returned")

// Query list bounds.
const (
	DefaultListLimit = 50
	MaxListLimit     = 500
)

// StatsFilter selects the queries a stats reader aggregates. Zero fields do
// not filter.
type StatsFilter struct {
	// Since keeps the queries created at or after it (until now).
	Since time.Time
	// Provider and Model are the provider and the model name, exactly.
	Provider, Model string
	// KeyID keeps only the queries asked with this API key; empty: every
	// caller's (what an admin key sees).
	KeyID string
}

// QueryFilter selects the queries a query lister returns, newest first. Zero
// fields do not filter.
type QueryFilter struct {
	// Since keeps queries created at or after it; Until those created
	// before it.
	Since, Until time.Time
	// Status is ok, error or cancelled.
	Status string
	// Provider is the provider (openai, extractive, ...), exactly.
	Provider string
	// Model is the model name, exactly.
	Model string
	// TopK is the top_k the query asked for.
	TopK int
	// Retrieval is the retrieval mode (hybrid, vector or lexical).
	Retrieval string
	// Limit is the page size: DefaultListLimit when 0, at most MaxListLimit.
	Limit int
	// Cursor is a previous page's NextCursor: the page after it.
	Cursor string
	// KeyID keeps only the queries asked with this API key; empty: every
	// caller's (what an admin key sees).
	KeyID string
}

// QuerySummary is one query of a list: its timings without attributes, and
// the duration of each of its stages.
type QuerySummary struct {
	ID               string             `json:"query_id" db:"id"`
	CreatedAt        time.Time          `json:"created_at" db:"created_at"`
	Question         string             `json:"question,omitempty" db:"question"`
	Model            string             `json:"model" db:"model"`
	Provider         string             `json:"provider" db:"provider"`
	Status           string             `json:"status" db:"status"`
	ErrorCode        string             `json:"error_code,omitempty" db:"error_code"`
	TopK             int                `json:"top_k" db:"top_k"`
	RerankTopN       int                `json:"rerank_top_n" db:"rerank_top_n"`
	Retrieval        string             `json:"retrieval,omitempty" db:"retrieval"`
	TTFTMs           *float64           `json:"ttft_ms" db:"ttft_ms"`
	FirstTokenMs     *float64           `json:"first_token_ms" db:"first_token_ms"`
	E2EMs            float64            `json:"e2e_ms" db:"e2e_ms"`
	QueueMs          float64            `json:"queue_ms" db:"queue_ms"`
	RetrievalMs      float64            `json:"retrieval_ms" db:"retrieval_ms"`
	GenTTFTMs        float64            `json:"gen_ttft_ms" db:"gen_ttft_ms"`
	LLMPrefillMs     float64            `json:"llm_prefill_ms" db:"llm_prefill_ms"`
	OverheadMs       *float64           `json:"overhead_ms" db:"overhead_ms"`
	RetrievalShare   *float64           `json:"retrieval_share" db:"retrieval_share"`
	PrefillShare     *float64           `json:"prefill_share" db:"prefill_share"`
	PromptTokens     int                `json:"prompt_tokens" db:"prompt_tokens"`
	CompletionTokens int                `json:"completion_tokens" db:"completion_tokens"`
	CachedTokens     *int               `json:"cached_tokens" db:"cached_tokens"`
	Stages           map[string]float64 `json:"stages" db:"stages"`
}

// QueryPage is one page of a query lister.
type QueryPage struct {
	Queries []QuerySummary `json:"queries"`
	// NextCursor fetches the next (older) page; empty on the last page.
	NextCursor string `json:"next_cursor,omitempty"`
}

// ProviderModel is one provider and model that answered queries in a window.
type ProviderModel struct {
	Provider string `json:"provider" db:"provider"`
	Model    string `json:"model" db:"model"`
	Queries  int64  `json:"queries" db:"queries"`
}

// Totals summarise a window.
type Totals struct {
	Queries   int64    `json:"queries" db:"queries"`
	OK        int64    `json:"ok" db:"ok"`
	Errors    int64    `json:"errors" db:"errors"`
	Cancelled int64    `json:"cancelled" db:"cancelled"`
	TTFTP50Ms *float64 `json:"ttft_p50_ms" db:"ttft_p50_ms"`
	TTFTP95Ms *float64 `json:"ttft_p95_ms" db:"ttft_p95_ms"`
	TTFTP99Ms *float64 `json:"ttft_p99_ms" db:"ttft_p99_ms"`
	// CacheHitRate is Σcached / Σprompt tokens.
	CacheHitRate *float64 `json:"cache_hit_rate" db:"cache_hit_rate"`
}

// SeriesPoint is one bucket of a window: TTFT percentiles, and the mean
// share of TTFT each part took, over the bucket's answered queries.
type SeriesPoint struct {
	Time           time.Time `json:"time" db:"time"`
	Queries        int64     `json:"queries" db:"queries"`
	TTFTP50Ms      *float64  `json:"ttft_p50_ms" db:"ttft_p50_ms"`
	TTFTP95Ms      *float64  `json:"ttft_p95_ms" db:"ttft_p95_ms"`
	TTFTP99Ms      *float64  `json:"ttft_p99_ms" db:"ttft_p99_ms"`
	QueueShare     *float64  `json:"queue_share" db:"queue_share"`
	RetrievalShare *float64  `json:"retrieval_share" db:"retrieval_share"`
	ConnectShare   *float64  `json:"llm_connect_share" db:"llm_connect_share"`
	PrefillShare   *float64  `json:"llm_prefill_share" db:"llm_prefill_share"`
	OverheadShare  *float64  `json:"overhead_share" db:"overhead_share"`
	CacheHitRate   *float64  `json:"cache_hit_rate" db:"cache_hit_rate"`
}

// StagePercentile is one row of stage_percentiles(since): one stage of
// one provider and model.
type StagePercentile struct {
	Provider string   `json:"provider" db:"provider"`
	Model    string   `json:"model" db:"model"`
	Stage    string   `json:"stage" db:"stage"`
	N        int64    `json:"n" db:"n"`
	P50Ms    *float64 `json:"p50_ms" db:"p50_ms"`
	P90Ms    *float64 `json:"p90_ms" db:"p90_ms"`
	P95Ms    *float64 `json:"p95_ms" db:"p95_ms"`
	P99Ms    *float64 `json:"p99_ms" db:"p99_ms"`
	MaxMs    *float64 `json:"max_ms" db:"max_ms"`
}

// TTFTTail is one row of the ttft_tail view: one hour of one provider and
// model.
type TTFTTail struct {
	Hour       time.Time `json:"hour" db:"hour"`
	Provider   string    `json:"provider" db:"provider"`
	Model      string    `json:"model" db:"model"`
	Queries    int64     `json:"queries" db:"queries"`
	Answered   int64     `json:"answered" db:"answered"`
	P50Ms      *float64  `json:"ttft_p50_ms" db:"ttft_p50_ms"`
	P95Ms      *float64  `json:"ttft_p95_ms" db:"ttft_p95_ms"`
	P99Ms      *float64  `json:"ttft_p99_ms" db:"ttft_p99_ms"`
	P99OverP50 *float64  `json:"p99_over_p50" db:"p99_over_p50"`
}

// TopKTradeoff is one row of topk_tradeoff(since): one top_k of one
// provider and model.
type TopKTradeoff struct {
	Provider           string   `json:"provider" db:"provider"`
	Model              string   `json:"model" db:"model"`
	TopK               int      `json:"top_k" db:"top_k"`
	Queries            int64    `json:"queries" db:"queries"`
	OK                 int64    `json:"ok" db:"ok"`
	TTFTP50Ms          *float64 `json:"ttft_p50_ms" db:"ttft_p50_ms"`
	TTFTP95Ms          *float64 `json:"ttft_p95_ms" db:"ttft_p95_ms"`
	RetrievalP50Ms     *float64 `json:"retrieval_p50_ms" db:"retrieval_p50_ms"`
	LLMPrefillP50Ms    *float64 `json:"llm_prefill_p50_ms" db:"llm_prefill_p50_ms"`
	PromptTokensMean   *float64 `json:"prompt_tokens_mean" db:"prompt_tokens_mean"`
	RetrievalShareMean *float64 `json:"retrieval_share_mean" db:"retrieval_share_mean"`
}

// CacheHitRate is one row of the cache_hit_rate view: one hour of one
// provider and model.
type CacheHitRate struct {
	Hour         time.Time `json:"hour" db:"hour"`
	Provider     string    `json:"provider" db:"provider"`
	Model        string    `json:"model" db:"model"`
	Queries      int64     `json:"queries" db:"queries"`
	PromptTokens int64     `json:"prompt_tokens" db:"prompt_tokens"`
	// CachedTokens and HitRate count the queries whose provider reported
	// cached tokens; both are nil when none did (Ollama): unknown, not 0.
	CachedTokens *int64   `json:"cached_tokens" db:"cached_tokens"`
	HitRate      *float64 `json:"hit_rate" db:"hit_rate"`
	// UnknownQueries counts the queries whose provider reported no cached
	// tokens.
	UnknownQueries int64 `json:"unknown_queries" db:"unknown_queries"`
}

// NetworkHealth is one row of the network_health view: one hour of one
// provider and model reached over the network (extractive, which answers
// in-process, has none).
type NetworkHealth struct {
	Hour                time.Time `json:"hour" db:"hour"`
	Provider            string    `json:"provider" db:"provider"`
	Model               string    `json:"model" db:"model"`
	LLMCalls            int64     `json:"llm_calls" db:"llm_calls"`
	ReusedShare         *float64  `json:"reused_share" db:"reused_share"`
	ConnectP50Ms        *float64  `json:"llm_connect_p50_ms" db:"llm_connect_p50_ms"`
	ConnectP95Ms        *float64  `json:"llm_connect_p95_ms" db:"llm_connect_p95_ms"`
	NewConnConnectP95Ms *float64  `json:"new_conn_connect_p95_ms" db:"new_conn_connect_p95_ms"`
	UpstreamErrors      int64     `json:"upstream_errors" db:"upstream_errors"`
}

// SlowQuery is one row of the slow_queries view.
type SlowQuery struct {
	ID             string    `json:"query_id" db:"query_id"`
	CreatedAt      time.Time `json:"created_at" db:"created_at"`
	Provider       string    `json:"provider" db:"provider"`
	Model          string    `json:"model" db:"model"`
	Status         string    `json:"status" db:"status"`
	ErrorCode      *string   `json:"error_code" db:"error_code"`
	TopK           int       `json:"top_k" db:"top_k"`
	TTFTMs         *float64  `json:"ttft_ms" db:"ttft_ms"`
	E2EMs          float64   `json:"e2e_ms" db:"e2e_ms"`
	RetrievalMs    float64   `json:"retrieval_ms" db:"retrieval_ms"`
	LLMPrefillMs   float64   `json:"llm_prefill_ms" db:"llm_prefill_ms"`
	RetrievalShare *float64  `json:"retrieval_share" db:"retrieval_share"`
	PrefillShare   *float64  `json:"prefill_share" db:"prefill_share"`
	DominantStage  *string   `json:"dominant_stage" db:"dominant_stage"`
	DominantMs     *float64  `json:"dominant_ms" db:"dominant_ms"`
	Question       *string   `json:"question" db:"question"`
}

// RecorderStats are a Recorder's counters since it was created.
type RecorderStats struct {
	// Queued is the records held now: waiting or being written.
	Queued int64 `json:"queued"`
	// Written is the records PostgreSQL has committed (a query id written
	// before counts as written, not again stored).
	Written int64 `json:"written"`
	// Dropped is the records lost because the queue was full, the recorder
	// was closed, or Close's deadline passed before they were written.
	Dropped int64 `json:"dropped"`
	// Failed is the records rejected as invalid (by PostgreSQL, such as a
	// status outside ok/error/cancelled, or before sending, such as an id
	// that is not a UUID); they are logged and skipped.
	Failed int64 `json:"failed"`
	// Retries is the batch writes that failed for a reason other than the
	// data (PostgreSQL away, schema missing) and were tried again.
	Retries int64 `json:"retries"`
	// Spooled is the records written to the disk spool.
	Spooled int64 `json:"spooled"`
	// Replayed is the spooled records settled from the spool: written
	// into PostgreSQL (included in Written) or rejected as invalid.
	Replayed int64 `json:"replayed"`
	// Spooling is true while records go to the spool rather than the
	// memory queue.
	Spooling bool `json:"spooling"`
	// Spool is what the spool holds; zero without a spool.
	Spool SpoolStats `json:"spool"`
}

// SpoolStats describe what the recorder's disk spool holds now.
type SpoolStats struct {
	// Bytes is the size of the spool's files on disk.
	Bytes int64 `json:"bytes"`
	// Records is the records spooled and not yet written to the database.
	Records int64 `json:"records"`
	// Oldest is when the oldest record held was spooled; zero when empty.
	Oldest time.Time `json:"-"`
	// OldestAgeSeconds is the age of the oldest record held; 0 when empty.
	OldestAgeSeconds float64 `json:"oldest_age_seconds"`
	// Corrupt is the corrupt records (or runs of garbage) found in the
	// spool's files and skipped since it was opened.
	Corrupt int64 `json:"corrupt"`
}

// DocumentInfo describes a stored document, as the vector stores list it
// and GET /v1/documents answers.
type DocumentInfo struct {
	DocID       string `json:"doc_id"`
	Title       string `json:"title"`
	ContentHash string `json:"content_hash,omitempty"`
	Chunks      int    `json:"chunks"`
}
