package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Stats is what the dashboard views say about the queries of one window.
// Times are milliseconds, shares and rates fractions (0..1); a nil number
// means there was nothing to compute it from.
type Stats struct {
	Since time.Time `json:"since"`
	Until time.Time `json:"until"`
	// Bucket is the width of a Series point.
	Bucket string `json:"bucket"`
	// Totals are over the whole window.
	Totals Totals `json:"totals"`
	// Series are the window's queries in Bucket-wide points, oldest first.
	Series []SeriesPoint `json:"series"`
	// StagePercentiles is stage_percentiles(since).
	StagePercentiles []StagePercentile `json:"stage_percentiles"`
	// TTFTTail is the ttft_tail view for the hours the window touches.
	TTFTTail []TTFTTail `json:"ttft_tail"`
	// TopK is topk_tradeoff(since).
	TopK []TopKTradeoff `json:"topk_tradeoff"`
	// CacheHitRate is the cache_hit_rate view for the hours the window touches.
	CacheHitRate []CacheHitRate `json:"cache_hit_rate"`
	// NetworkHealth is the network_health view for the hours the window touches.
	NetworkHealth []NetworkHealth `json:"network_health"`
	// SlowQueries are the window's slowest queries (slow_queries), slowest first.
	SlowQueries []SlowQuery `json:"slow_queries"`
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

// StagePercentile is one row of stage_percentiles(since).
type StagePercentile struct {
	Stage string   `json:"stage" db:"stage"`
	N     int64    `json:"n" db:"n"`
	P50Ms *float64 `json:"p50_ms" db:"p50_ms"`
	P90Ms *float64 `json:"p90_ms" db:"p90_ms"`
	P95Ms *float64 `json:"p95_ms" db:"p95_ms"`
	P99Ms *float64 `json:"p99_ms" db:"p99_ms"`
	MaxMs *float64 `json:"max_ms" db:"max_ms"`
}

// TTFTTail is one row of the ttft_tail view.
type TTFTTail struct {
	Hour       time.Time `json:"hour" db:"hour"`
	Model      string    `json:"model" db:"model"`
	Queries    int64     `json:"queries" db:"queries"`
	Answered   int64     `json:"answered" db:"answered"`
	P50Ms      *float64  `json:"ttft_p50_ms" db:"ttft_p50_ms"`
	P95Ms      *float64  `json:"ttft_p95_ms" db:"ttft_p95_ms"`
	P99Ms      *float64  `json:"ttft_p99_ms" db:"ttft_p99_ms"`
	P99OverP50 *float64  `json:"p99_over_p50" db:"p99_over_p50"`
}

// TopKTradeoff is one row of topk_tradeoff(since).
type TopKTradeoff struct {
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

// CacheHitRate is one row of the cache_hit_rate view.
type CacheHitRate struct {
	Hour         time.Time `json:"hour" db:"hour"`
	Model        string    `json:"model" db:"model"`
	Queries      int64     `json:"queries" db:"queries"`
	PromptTokens int64     `json:"prompt_tokens" db:"prompt_tokens"`
	CachedTokens int64     `json:"cached_tokens" db:"cached_tokens"`
	HitRate      *float64  `json:"hit_rate" db:"hit_rate"`
}

// NetworkHealth is one row of the network_health view.
type NetworkHealth struct {
	Hour                time.Time `json:"hour" db:"hour"`
	Provider            string    `json:"provider" db:"provider"`
	LLMCalls            int64     `json:"llm_calls" db:"llm_calls"`
	ReusedShare         *float64  `json:"reused_share" db:"reused_share"`
	ConnectP50Ms        *float64  `json:"llm_connect_p50_ms" db:"llm_connect_p50_ms"`
	ConnectP95Ms        *float64  `json:"llm_connect_p95_ms" db:"llm_connect_p95_ms"`
	NewConnConnectP95Ms *float64  `json:"new_conn_connect_p95_ms" db:"new_conn_connect_p95_ms"`
	UpstreamErrors      int64     `json:"upstream_errors" db:"upstream_errors"`
}

// SlowQuery is one row of the slow_queries view.
type SlowQuery struct {
	ID             string    `json:"query_id" db:"id"`
	CreatedAt      time.Time `json:"created_at" db:"created_at"`
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

// SlowQueryLimit is how many slow queries Stats returns.
const SlowQueryLimit = 20

// bucketFor picks a series bucket giving at most about 60 points.
func bucketFor(window time.Duration) time.Duration {
	for _, b := range []time.Duration{time.Minute, 5 * time.Minute, 15 * time.Minute, time.Hour, 6 * time.Hour, 24 * time.Hour} {
		if window/b <= 60 {
			return b
		}
	}
	return 7 * 24 * time.Hour
}

const totalsSQL = `SELECT count(*) AS queries,
	count(*) FILTER (WHERE status = 'ok') AS ok,
	count(*) FILTER (WHERE status = 'error') AS errors,
	count(*) FILTER (WHERE status = 'cancelled') AS cancelled,
	(percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP (ORDER BY ttft_ms))[1] AS ttft_p50_ms,
	(percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP (ORDER BY ttft_ms))[2] AS ttft_p95_ms,
	(percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP (ORDER BY ttft_ms))[3] AS ttft_p99_ms,
	sum(cached_tokens)::double precision / nullif(sum(prompt_tokens), 0) AS cache_hit_rate
FROM queries WHERE created_at >= $1 AND created_at < $2`

const seriesSQL = `SELECT date_bin($3::interval, created_at, '2000-01-01 00:00:00+00') AS time,
	count(*) AS queries,
	(percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP (ORDER BY ttft_ms))[1] AS ttft_p50_ms,
	(percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP (ORDER BY ttft_ms))[2] AS ttft_p95_ms,
	(percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP (ORDER BY ttft_ms))[3] AS ttft_p99_ms,
	avg(queue_ms / nullif(ttft_ms, 0)) AS queue_share,
	avg(retrieval_share) AS retrieval_share,
	avg((gen_ttft_ms - llm_prefill_ms) / nullif(ttft_ms, 0)) AS llm_connect_share,
	avg(prefill_share) AS llm_prefill_share,
	avg(overhead_ms / nullif(ttft_ms, 0)) AS overhead_share,
	sum(cached_tokens)::double precision / nullif(sum(prompt_tokens), 0) AS cache_hit_rate
FROM queries WHERE created_at >= $1 AND created_at < $2
GROUP BY 1 ORDER BY 1`

// hourFrom is the views' hour expression; a filter on it uses queries_hour_idx.
const hourFrom = `date_trunc('hour', $1::timestamptz AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'`

// Stats reads every dashboard view for the queries created in [since, now).
func (s *Store) Stats(ctx context.Context, since time.Time) (Stats, error) {
	until := time.Now()
	bucket := bucketFor(until.Sub(since))
	st := Stats{Since: since.UTC(), Until: until.UTC(), Bucket: bucket.String()}

	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly, IsoLevel: pgx.RepeatableRead})
	if err != nil {
		return Stats{}, fmt.Errorf("read stats: %w", err)
	}
	defer func() { _ = tx.Rollback(ctx) }()

	rows, _ := tx.Query(ctx, totalsSQL, since, until)
	if st.Totals, err = pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[Totals]); err != nil {
		return Stats{}, fmt.Errorf("read stats totals: %w", err)
	}
	reads := []struct {
		what string
		sql  string
		args []any
		into func(pgx.Rows) error
	}{
		{"series", seriesSQL, []any{since, until, bucket}, collect(&st.Series)},
		{"stage_percentiles", `SELECT * FROM stage_percentiles($1)`, []any{since}, collect(&st.StagePercentiles)},
		{"ttft_tail", `SELECT * FROM ttft_tail WHERE hour >= ` + hourFrom + ` ORDER BY hour, model`, []any{since}, collect(&st.TTFTTail)},
		{"topk_tradeoff", `SELECT * FROM topk_tradeoff($1)`, []any{since}, collect(&st.TopK)},
		{"cache_hit_rate", `SELECT * FROM cache_hit_rate WHERE hour >= ` + hourFrom + ` ORDER BY hour, model`, []any{since}, collect(&st.CacheHitRate)},
		{"network_health", `SELECT * FROM network_health WHERE hour >= ` + hourFrom + ` ORDER BY hour, provider`, []any{since}, collect(&st.NetworkHealth)},
		{"slow_queries", `SELECT * FROM slow_queries WHERE created_at >= $1
			ORDER BY ttft_ms DESC NULLS LAST, e2e_ms DESC LIMIT $2`, []any{since, SlowQueryLimit}, collect(&st.SlowQueries)},
	}
	for _, r := range reads {
		rows, err := tx.Query(ctx, r.sql, r.args...)
		if err != nil {
			return Stats{}, fmt.Errorf("read stats %s: %w", r.what, err)
		}
		if err := r.into(rows); err != nil {
			return Stats{}, fmt.Errorf("read stats %s: %w", r.what, err)
		}
	}
	for i := range st.SlowQueries {
		st.SlowQueries[i].CreatedAt = st.SlowQueries[i].CreatedAt.UTC()
	}
	return st, nil
}

// collect returns a function that scans rows by column name into *dst,
// leaving an empty (not nil) slice when there are none, so that JSON shows [].
func collect[T any](dst *[]T) func(pgx.Rows) error {
	return func(rows pgx.Rows) error {
		list, err := pgx.CollectRows(rows, pgx.RowToStructByName[T])
		if err != nil {
			return err
		}
		if list == nil {
			list = []T{}
		}
		*dst = list
		return nil
	}
}
