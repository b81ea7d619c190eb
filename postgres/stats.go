package postgres

import (
	"context"
	"fmt"
	"time"

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
	sum(cached_tokens)::double precision / nullif(sum(prompt_tokens) FILTER (WHERE cached_tokens IS NOT NULL), 0) AS cache_hit_rate
FROM queries WHERE created_at >= $1 AND created_at < $2
GROUP BY 1 ORDER BY 1`

// hourFrom is the views' hour expression; a filter on it uses queries_hour_idx.
const hourFrom = `date_trunc('hour', $1::timestamptz AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'`

// Stats reads every dashboard view for the queries created in [since, now).
func (s *Store) Stats(ctx context.Context, since time.Time) (pipeline.Stats, error) {
	until := time.Now()
	bucket := bucketFor(until.Sub(since))
	st := pipeline.Stats{Since: since.UTC(), Until: until.UTC(), Bucket: bucket.String()}

	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly, IsoLevel: pgx.RepeatableRead})
	if err != nil {
		return pipeline.Stats{}, fmt.Errorf("read stats: %w", err)
	}
	defer func() { _ = tx.Rollback(ctx) }()

	rows, _ := tx.Query(ctx, totalsSQL, since, until)
	if st.Totals, err = pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[pipeline.Totals]); err != nil {
		return pipeline.Stats{}, fmt.Errorf("read stats totals: %w", err)
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
			return pipeline.Stats{}, fmt.Errorf("read stats %s: %w", r.what, err)
		}
		if err := r.into(rows); err != nil {
			return pipeline.Stats{}, fmt.Errorf("read stats %s: %w", r.what, err)
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
