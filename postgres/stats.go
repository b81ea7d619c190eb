package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"ragtime/pipeline"
)

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
	sum(cached_tokens)::double precision / nullif(sum(prompt_tokens) FILTER (WHERE cached_tokens IS NOT NULL), 0) AS cache_hit_rate
FROM queries WHERE created_at >= $1 AND created_at < $2%s`

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
	sum(cached_tokens)::double precision / nullif(sum(prompt_tokens) FILTER (WHERE cached_tokens IS NOT NULL), 0) AS cache_hit_rate
FROM queries WHERE created_at >= $1 AND created_at < $2%s
GROUP BY 1 ORDER BY 1`

// hourFrom is the views' hour expression; a filter on it uses queries_hour_idx.
const hourFrom = `date_trunc('hour', $1::timestamptz AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'`

// Stats reads every dashboard view for the queries created in [since, now).
// With a keyID it reads only the queries asked with that API key: totals,
// series, stage percentiles, the top-k trade-off and the slow queries; the
// hourly views (ttft_tail, cache_hit_rate, network_health) aggregate every
// caller's queries and come back empty.
func (s *Store) Stats(ctx context.Context, since time.Time, keyID string) (pipeline.Stats, error) {
	until := time.Now()
	bucket := bucketFor(until.Sub(since))
	st := pipeline.Stats{Since: since.UTC(), Until: until.UTC(), Bucket: bucket.String()}

	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly, IsoLevel: pgx.RepeatableRead})
	if err != nil {
		return pipeline.Stats{}, fmt.Errorf("read stats: %w", err)
	}
	defer func() { _ = tx.Rollback(ctx) }()

	if keyID != "" {
		return s.keyStats(ctx, tx, st, since, until, bucket, keyID)
	}
	rows, _ := tx.Query(ctx, fmt.Sprintf(totalsSQL, ""), since, until)
	if st.Totals, err = pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[pipeline.Totals]); err != nil {
		return pipeline.Stats{}, fmt.Errorf("read stats totals: %w", err)
	}
	reads := []statsRead{
		{"series", fmt.Sprintf(seriesSQL, ""), []any{since, until, bucket}, collect(&st.Series)},
		{"stage_percentiles", `SELECT * FROM stage_percentiles($1)`, []any{since}, collect(&st.StagePercentiles)},
		{"ttft_tail", `SELECT * FROM ttft_tail WHERE hour >= ` + hourFrom + ` ORDER BY hour, model`, []any{since}, collect(&st.TTFTTail)},
		{"topk_tradeoff", `SELECT * FROM topk_tradeoff($1)`, []any{since}, collect(&st.TopK)},
		{"cache_hit_rate", `SELECT * FROM cache_hit_rate WHERE hour >= ` + hourFrom + ` ORDER BY hour, model`, []any{since}, collect(&st.CacheHitRate)},
		{"network_health", `SELECT * FROM network_health WHERE hour >= ` + hourFrom + ` ORDER BY hour, provider`, []any{since}, collect(&st.NetworkHealth)},
		{"slow_queries", `SELECT * FROM slow_queries WHERE created_at >= $1
			ORDER BY ttft_ms DESC NULLS LAST, e2e_ms DESC LIMIT $2`, []any{since, SlowQueryLimit}, collect(&st.SlowQueries)},
	}
	return runStatsReads(ctx, tx, &st, reads)
}

// statsRead is one view read into one field of Stats.
type statsRead struct {
	what string
	sql  string
	args []any
	into func(pgx.Rows) error
}

// runStatsReads runs reads, whose into functions fill *st, and returns *st.
func runStatsReads(ctx context.Context, tx pgx.Tx, st *pipeline.Stats, reads []statsRead) (pipeline.Stats, error) {
	for _, r := range reads {
		rows, err := tx.Query(ctx, r.sql, r.args...)
		if err != nil {
			return pipeline.Stats{}, fmt.Errorf("read stats %s: %w", r.what, err)
		}
		if err := r.into(rows); err != nil {
			return pipeline.Stats{}, fmt.Errorf("read stats %s: %w", r.what, err)
		}
	}
	for i := range st.SlowQueries {
		st.SlowQueries[i].CreatedAt = st.SlowQueries[i].CreatedAt.UTC()
	}
	return *st, nil
}

// keyStats is Stats for the queries of one API key.
func (s *Store) keyStats(ctx context.Context, tx pgx.Tx, st pipeline.Stats, since, until time.Time, bucket time.Duration, keyID string) (pipeline.Stats, error) {
	st.TTFTTail, st.CacheHitRate, st.NetworkHealth = []pipeline.TTFTTail{}, []pipeline.CacheHitRate{}, []pipeline.NetworkHealth{}
	key, err := uuid.Parse(keyID)
	if err != nil {
		return pipeline.Stats{}, fmt.Errorf("read stats: key id %.80q is not a UUID", keyID)
	}
	rows, _ := tx.Query(ctx, fmt.Sprintf(totalsSQL, " AND key_id = $3"), since, until, key)
	if st.Totals, err = pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[pipeline.Totals]); err != nil {
		return pipeline.Stats{}, fmt.Errorf("read stats totals: %w", err)
	}
	return runStatsReads(ctx, tx, &st, []statsRead{
		{"series", fmt.Sprintf(seriesSQL, " AND key_id = $4"), []any{since, until, bucket, key}, collect(&st.Series)},
		{"stage_percentiles", `SELECT * FROM stage_percentiles($1, $2)`, []any{since, key}, collect(&st.StagePercentiles)},
		{"topk_tradeoff", `SELECT * FROM topk_tradeoff($1, $2)`, []any{since, key}, collect(&st.TopK)},
		{"slow_queries", `SELECT * FROM slow_queries WHERE created_at >= $1
			AND query_id IN (SELECT id FROM queries WHERE key_id = $3 AND created_at >= $1)
			ORDER BY ttft_ms DESC NULLS LAST, e2e_ms DESC LIMIT $2`, []any{since, SlowQueryLimit, key}, collect(&st.SlowQueries)},
	})
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
