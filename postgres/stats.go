package postgres

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"ragtime"
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

// The reads round as the views do: milliseconds with round_ms (0.001),
// shares and rates with round_share (0.0001).
const totalsSQL = `SELECT count(*) AS queries,
	count(*) FILTER (WHERE status = 'ok') AS ok,
	count(*) FILTER (WHERE status = 'error') AS errors,
	count(*) FILTER (WHERE status = 'cancelled') AS cancelled,
	round_ms((percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP (ORDER BY ttft_ms))[1]) AS ttft_p50_ms,
	round_ms((percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP (ORDER BY ttft_ms))[2]) AS ttft_p95_ms,
	round_ms((percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP (ORDER BY ttft_ms))[3]) AS ttft_p99_ms,
	round_share(sum(cached_tokens)::double precision / nullif(sum(prompt_tokens) FILTER (WHERE cached_tokens IS NOT NULL), 0)) AS cache_hit_rate
FROM queries WHERE created_at >= $1 AND created_at < $2%s`

const seriesSQL = `SELECT date_bin($3::interval, created_at, '2000-01-01 00:00:00+00') AS time,
	count(*) AS queries,
	round_ms((percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP (ORDER BY ttft_ms))[1]) AS ttft_p50_ms,
	round_ms((percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP (ORDER BY ttft_ms))[2]) AS ttft_p95_ms,
	round_ms((percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP (ORDER BY ttft_ms))[3]) AS ttft_p99_ms,
	round_share(avg(queue_ms / nullif(ttft_ms, 0))) AS queue_share,
	round_share(avg(retrieval_share)) AS retrieval_share,
	round_share(avg((gen_ttft_ms - llm_prefill_ms) / nullif(ttft_ms, 0))) AS llm_connect_share,
	round_share(avg(prefill_share)) AS llm_prefill_share,
	round_share(avg(overhead_ms / nullif(ttft_ms, 0))) AS overhead_share,
	round_share(sum(cached_tokens)::double precision / nullif(sum(prompt_tokens) FILTER (WHERE cached_tokens IS NOT NULL), 0)) AS cache_hit_rate
FROM queries WHERE created_at >= $1 AND created_at < $2%s
GROUP BY 1 ORDER BY 1`

// rollupAfter is how long a window must be for Stats to read its models,
// totals and series from the roll-ups (as stage_percentiles does): an hour
// and a minute of grace, so that "the last hour" stays exact.
const rollupAfter = 61 * time.Minute

// rollupTotalsSQL is totalsSQL from the roll-ups of [$1, $2); %s takes
// conditions on provider and model, as totalsSQL's.
const rollupTotalsSQL = `SELECT queries, queries - failed AS ok, errors, cancelled,
	round_ms(p[1]) AS ttft_p50_ms, round_ms(p[2]) AS ttft_p95_ms, round_ms(p[3]) AS ttft_p99_ms, round_share(cache_hit_rate) AS cache_hit_rate
FROM (
	SELECT coalesce(sum(n) FILTER (WHERE stage = 'e2e'), 0)::bigint AS queries,
		coalesce(sum(n) FILTER (WHERE stage IN ('e2e_error', 'e2e_cancelled')), 0)::bigint AS failed,
		coalesce(sum(n) FILTER (WHERE stage = 'e2e_error'), 0)::bigint AS errors,
		coalesce(sum(n) FILTER (WHERE stage = 'e2e_cancelled'), 0)::bigint AS cancelled,
		rollup_percentiles(rollup_hist_sum(hist) FILTER (WHERE stage = 'ttft'), ARRAY[0.5, 0.95, 0.99]) AS p,
		sum(sum_ms) FILTER (WHERE stage = 'tokens_cached') / nullif(sum(sum_ms) FILTER (WHERE stage = 'tokens_prompt'), 0) AS cache_hit_rate
	FROM query_rollups_between($1, $2)
	WHERE stage IN ('e2e', 'e2e_error', 'e2e_cancelled', 'ttft', 'tokens_prompt', 'tokens_cached')%s
) x`

// rollupSeriesSQL is seriesSQL from the roll-ups of [$1, $2): a share is
// the mean of the queries' shares (sum / n), as avg over raw rows. Buckets
// shorter than an hour are made of minute rows only.
const rollupSeriesSQL = `SELECT time, queries, round_ms(p[1]) AS ttft_p50_ms, round_ms(p[2]) AS ttft_p95_ms, round_ms(p[3]) AS ttft_p99_ms,
	round_share(queue_share) AS queue_share, round_share(retrieval_share) AS retrieval_share,
	round_share(llm_connect_share) AS llm_connect_share, round_share(llm_prefill_share) AS llm_prefill_share,
	round_share(overhead_share) AS overhead_share, round_share(cache_hit_rate) AS cache_hit_rate
FROM (
	SELECT date_bin($3::interval, start, '2000-01-01 00:00:00+00') AS time,
		coalesce(sum(n) FILTER (WHERE stage = 'e2e'), 0)::bigint AS queries,
		rollup_percentiles(rollup_hist_sum(hist) FILTER (WHERE stage = 'ttft'), ARRAY[0.5, 0.95, 0.99]) AS p,
		sum(sum_ms) FILTER (WHERE stage = 'share_queue') / nullif(sum(n) FILTER (WHERE stage = 'share_queue'), 0) AS queue_share,
		sum(sum_ms) FILTER (WHERE stage = 'share_retrieval') / nullif(sum(n) FILTER (WHERE stage = 'share_retrieval'), 0) AS retrieval_share,
		sum(sum_ms) FILTER (WHERE stage = 'share_llm_connect') / nullif(sum(n) FILTER (WHERE stage = 'share_llm_connect'), 0) AS llm_connect_share,
		sum(sum_ms) FILTER (WHERE stage = 'share_llm_prefill') / nullif(sum(n) FILTER (WHERE stage = 'share_llm_prefill'), 0) AS llm_prefill_share,
		sum(sum_ms) FILTER (WHERE stage = 'share_overhead') / nullif(sum(n) FILTER (WHERE stage = 'share_overhead'), 0) AS overhead_share,
		sum(sum_ms) FILTER (WHERE stage = 'tokens_cached') / nullif(sum(sum_ms) FILTER (WHERE stage = 'tokens_prompt'), 0) AS cache_hit_rate
	FROM (
		SELECT * FROM query_rollups_between($1, $2) WHERE $3::interval >= interval '1 hour'
		UNION ALL
		SELECT * FROM query_rollups WHERE $3::interval < interval '1 hour' AND span = 'minute'
			AND start >= date_trunc('minute', $1::timestamptz AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' AND start < $2
	) r
	WHERE stage IN ('e2e', 'ttft', 'share_queue', 'share_retrieval', 'share_llm_connect', 'share_llm_prefill',
	                'share_overhead', 'tokens_prompt', 'tokens_cached')%s
	GROUP BY 1
) x
WHERE queries > 0
ORDER BY 1`

// rollupModelsSQL is modelsSQL from the roll-ups of [$1, $2).
const rollupModelsSQL = `SELECT provider, model, sum(n)::bigint AS queries
FROM query_rollups_between($1, $2) WHERE stage = 'e2e'%s
GROUP BY provider, model ORDER BY provider, model`

// hourFrom is the views' hour expression; a filter on it uses queries_hour_idx.
const hourFrom = `date_trunc('hour', $1::timestamptz AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'`

// modelsSQL lists the providers and models of a window, for a page's
// selector.
const modelsSQL = `SELECT provider, model, count(*) AS queries
FROM queries WHERE created_at >= $1 AND created_at < $2%s
GROUP BY provider, model ORDER BY provider, model`

// prefillPointsSQL is the window prefill_model fits (migration 0038): per
// provider and model, the last 256 ok queries of the past hour, each one's
// llm_prefill_ms against its uncached prompt tokens.
const prefillPointsSQL = `SELECT provider, model, created_at, uncached_tokens, prefill_ms FROM (
	SELECT provider, model, created_at, greatest(prompt_tokens - coalesce(cached_tokens, 0), 0) AS uncached_tokens,
	       round(llm_prefill_ms::numeric, 3)::double precision AS prefill_ms, row_number() OVER (PARTITION BY provider, model ORDER BY created_at DESC) AS age
	FROM queries
	WHERE created_at > now() - interval '1 hour' AND status = 'ok' AND prompt_tokens > 0 AND llm_prefill_ms > 0%s
) w WHERE age <= 256 ORDER BY provider, model, uncached_tokens, created_at`

// Stats reads every dashboard view for the queries f selects: created in
// [f.Since, now), of f.Provider and f.Model when given. With a KeyID it
// reads only the queries asked with that API key: totals, series, stage
// percentiles, the top-k trade-off and the slow queries; the hourly views
// (ttft_tail, cache_hit_rate, network_health) aggregate every caller's
// queries and come back empty. Models lists the providers and models of
// the window (of the key's queries), whatever f.Provider and f.Model.
func (s *Store) Stats(ctx context.Context, f ragtime.StatsFilter) (pipeline.Stats, error) {
	since := f.Since
	until := time.Now()
	bucket := bucketFor(until.Sub(since))
	st := pipeline.Stats{Since: since.UTC(), Until: until.UTC(), Bucket: bucket.String(), Provider: f.Provider, Model: f.Model}

	// The conditions hold only the filters given, so that each shape gets
	// a plan of its own (a generic "$n = '' OR ..." plan would not use the
	// indexes, nor be pushed into the functions).
	var byModel, byKey, bySlowKey []filterCond
	if f.Provider != "" {
		byModel = append(byModel, filterCond{"provider = ?", f.Provider})
	}
	if f.Model != "" {
		byModel = append(byModel, filterCond{"model = ?", f.Model})
	}
	var key *uuid.UUID
	if f.KeyID != "" {
		k, err := uuid.Parse(f.KeyID)
		if err != nil {
			return pipeline.Stats{}, fmt.Errorf("read stats: key id %.80q is not a UUID", f.KeyID)
		}
		key = &k
		byKey = []filterCond{{"key_id = ?", k}}
		bySlowKey = []filterCond{{"query_id IN (SELECT id FROM queries WHERE key_id = ? AND created_at >= $1)", k}}
	}
	onQueries := append(append([]filterCond{}, byModel...), byKey...)
	// A window longer than an hour (of every key's queries: the roll-ups
	// do not keep the key) reads the roll-ups — within 1 % for the
	// percentiles, to the minute — not every raw row of it.
	totalsQ, seriesQ, modelsQ := totalsSQL, seriesSQL, modelsSQL
	if key == nil && until.Sub(since) > rollupAfter {
		totalsQ, seriesQ, modelsQ = rollupTotalsSQL, rollupSeriesSQL, rollupModelsSQL
	}

	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly, IsoLevel: pgx.RepeatableRead})
	if err != nil {
		return pipeline.Stats{}, fmt.Errorf("read stats: %w", err)
	}
	defer func() { _ = tx.Rollback(ctx) }()

	totals := and([]any{since, until}, onQueries)
	rows, _ := tx.Query(ctx, strings.Replace(totalsQ, "%s", totals.cond, 1), totals.args...)
	if st.Totals, err = pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[ragtime.Totals]); err != nil {
		return pipeline.Stats{}, fmt.Errorf("read stats totals: %w", err)
	}
	read := func(what, sql string, b bound, into func(pgx.Rows) error) statsRead {
		return statsRead{what, strings.Replace(sql, "%s", b.cond, 1), b.args, into}
	}
	reads := []statsRead{
		read("models", modelsQ, (and([]any{since, until}, byKey)), collect(&st.Models)),
		read("series", seriesQ, (and([]any{since, until, bucket}, onQueries)), collect(&st.Series)),
		read("stage_percentiles", `SELECT * FROM stage_percentiles($1, $2) WHERE true%s`, (and([]any{since, key}, byModel)), collect(&st.StagePercentiles)),
		read("topk_tradeoff", `SELECT * FROM topk_tradeoff($1, $2) WHERE true%s`, (and([]any{since, key}, byModel)), collect(&st.TopK)),
		read("slow_queries", `SELECT * FROM slow_queries WHERE created_at >= $1%s
			ORDER BY ttft_ms DESC NULLS LAST, e2e_ms DESC LIMIT $2`, (and([]any{since, SlowQueryLimit}, append(byModel, bySlowKey...))), collect(&st.SlowQueries)),
	}
	if key == nil {
		for _, v := range []struct {
			name string
			into func(pgx.Rows) error
		}{{"ttft_tail", collect(&st.TTFTTail)}, {"cache_hit_rate", collect(&st.CacheHitRate)}, {"network_health", collect(&st.NetworkHealth)},
			{"budget_outcomes", collect(&st.BudgetOutcomes)}} {
			reads = append(reads, read(v.name, `SELECT * FROM `+v.name+` WHERE hour >= `+hourFrom+`%s ORDER BY hour, provider, model`,
				(and([]any{since}, byModel)), v.into))
		}
		reads = append(reads, read("prefill_model", `SELECT * FROM prefill_model WHERE true%s ORDER BY provider, model`, and(nil, byModel), collect(&st.PrefillModel)),
			read("prefill_points", prefillPointsSQL, and(nil, byModel), collect(&st.PrefillPoints)))
	} else {
		st.TTFTTail, st.CacheHitRate, st.NetworkHealth = []ragtime.TTFTTail{}, []ragtime.CacheHitRate{}, []ragtime.NetworkHealth{}
		st.BudgetOutcomes, st.PrefillModel, st.PrefillPoints = []pipeline.BudgetOutcome{}, []pipeline.PrefillFit{}, []pipeline.PrefillPoint{}
	}
	return runStatsReads(ctx, tx, &st, reads)
}

// Models lists the providers and models of the queries created in
// [f.Since, now) (of f.KeyID's queries when set), with their query counts;
// f.Provider and f.Model are ignored: these are the choices of a filter.
func (s *Store) Models(ctx context.Context, f ragtime.StatsFilter) ([]ragtime.ProviderModel, error) {
	var byKey []filterCond
	if f.KeyID != "" {
		k, err := uuid.Parse(f.KeyID)
		if err != nil {
			return []ragtime.ProviderModel{}, nil // no query has that key
		}
		byKey = []filterCond{{"key_id = ?", k}}
	}
	models, until := modelsSQL, time.Now()
	if f.KeyID == "" && until.Sub(f.Since) > rollupAfter {
		models = rollupModelsSQL
	}
	b := and([]any{f.Since, until}, byKey)
	rows, err := s.pool.Query(ctx, strings.Replace(models, "%s", b.cond, 1), b.args...)
	if err != nil {
		return nil, fmt.Errorf("read the models of the queries: %w", err)
	}
	var list []ragtime.ProviderModel
	if err := collect(&list)(rows); err != nil {
		return nil, fmt.Errorf("read the models of the queries: %w", err)
	}
	return list, nil
}

// filterCond is one condition of a read, its value's place written "?".
type filterCond struct {
	sql string
	v   any
}

// bound is a read's arguments and the conditions that use them.
type bound struct {
	args []any
	cond string
}

// and appends the values of conds to args and returns them with the
// conditions, " AND ..." each, their "?" numbered after args.
func and(args []any, conds []filterCond) bound {
	var b strings.Builder
	for _, c := range conds {
		args = append(args, c.v)
		b.WriteString(" AND " + strings.Replace(c.sql, "?", "$"+strconv.Itoa(len(args)), 1))
	}
	return bound{args, b.String()}
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
