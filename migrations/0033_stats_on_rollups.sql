-- /v1/stats reads the roll-ups for a window longer than an hour too: its
-- totals and series need, besides the counts and TTFT histograms, the mean
-- shares of TTFT and the cache hit rate, so the recorder adds pseudo-stages
-- whose sum_ms / n is that mean: share_queue, share_retrieval,
-- share_llm_connect, share_llm_prefill, share_overhead (fractions of
-- ttft_ms, as the raw series computes them), and tokens_prompt and
-- tokens_cached (the prompt and cached tokens of the queries whose provider
-- reports cached tokens). The roll-ups are rebuilt from the stored queries.
--
-- query_rollups_between(since, until) is the one place that picks the rows
-- of a window: whole minutes from since's minute up to the first hour
-- boundary, whole hours after it.

-- +goose Up
-- +goose StatementBegin
CREATE FUNCTION query_rollups_between(since timestamptz, until timestamptz) RETURNS SETOF query_rollups
LANGUAGE sql STABLE AS $$
    SELECT r.* FROM query_rollups r,
        (SELECT date_trunc('minute', since AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' AS minute_from,
                date_trunc('hour', (since AT TIME ZONE 'UTC') + interval '1 hour' - interval '1 microsecond') AT TIME ZONE 'UTC' AS hour_from) b
    WHERE (r.span = 'hour' AND r.start >= b.hour_from AND r.start < until)
       OR (r.span = 'minute' AND r.start >= b.minute_from AND r.start < b.hour_from AND r.start < until)
$$;
-- +goose StatementEnd

COMMENT ON FUNCTION query_rollups_between(timestamptz, timestamptz) IS 'The roll-up rows of [since, until), to the minute: minute rows from since''s minute to the first hour boundary, hour rows after it.';

-- +goose StatementBegin
CREATE FUNCTION rollup_pseudo_stage(stage text) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT stage IN ('ttft', 'e2e', 'e2e_error', 'e2e_cancelled') OR stage LIKE 'share\_%' OR stage LIKE 'tokens\_%'
$$;
-- +goose StatementEnd

COMMENT ON FUNCTION rollup_pseudo_stage(text) IS 'Whether a query_rollups.stage summarises queries (ttft, e2e..., share_..., tokens_...) rather than being a pipeline stage.';

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION rollup_fill(since timestamptz, until timestamptz) RETURNS bigint
LANGUAGE sql AS $$
    WITH durations AS (
        SELECT q.created_at, q.provider, q.model, s.name AS stage, s.duration_ms AS ms
        FROM query_stages s JOIN queries q ON q.id = s.query_id AND q.created_at = s.created_at
        WHERE s.created_at >= since AND s.created_at < until AND q.created_at >= since AND q.created_at < until
        UNION ALL
        SELECT created_at, provider, model, 'ttft', ttft_ms FROM queries
        WHERE created_at >= since AND created_at < until AND ttft_ms IS NOT NULL
        UNION ALL
        SELECT created_at, provider, model, 'e2e', e2e_ms FROM queries
        WHERE created_at >= since AND created_at < until
        UNION ALL
        SELECT created_at, provider, model, 'e2e_' || status, e2e_ms FROM queries
        WHERE created_at >= since AND created_at < until AND status <> 'ok'
        UNION ALL
        SELECT created_at, provider, model, x.stage, x.v FROM queries,
        LATERAL (VALUES ('share_queue', queue_ms / nullif(ttft_ms, 0)),
                        ('share_llm_connect', (gen_ttft_ms - llm_prefill_ms) / nullif(ttft_ms, 0)),
                        ('share_overhead', overhead_ms / nullif(ttft_ms, 0)),
                        ('share_retrieval', retrieval_share),
                        ('share_llm_prefill', prefill_share),
                        ('tokens_prompt', CASE WHEN cached_tokens IS NOT NULL THEN prompt_tokens::double precision END),
                        ('tokens_cached', cached_tokens::double precision)) AS x(stage, v)
        WHERE created_at >= since AND created_at < until AND x.v IS NOT NULL
    ),
    buckets AS (
        SELECT date_trunc('minute', created_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' AS start, provider, model, stage,
               rollup_bucket(ms) AS bucket, count(*) AS n, sum(ms) AS sum_ms, max(ms) AS max_ms
        FROM durations GROUP BY 1, 2, 3, 4, 5
    ),
    hour_buckets AS (
        SELECT date_trunc('hour', start AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' AS start, provider, model, stage, bucket,
               sum(n) AS n, sum(sum_ms) AS sum_ms, max(max_ms) AS max_ms
        FROM buckets GROUP BY 1, 2, 3, 4, 5
    ),
    minutes AS (
        SELECT start, provider, model, stage, sum(n)::bigint AS n, sum(sum_ms) AS sum_ms, max(max_ms) AS max_ms,
               rollup_hist_of(array_agg(bucket), array_agg(n::bigint)) AS hist
        FROM buckets GROUP BY 1, 2, 3, 4
    ),
    hours AS (
        SELECT start, provider, model, stage, sum(n)::bigint AS n, sum(sum_ms) AS sum_ms, max(max_ms) AS max_ms,
               rollup_hist_of(array_agg(bucket), array_agg(n::bigint)) AS hist
        FROM hour_buckets GROUP BY 1, 2, 3, 4
    ),
    ins AS (
        INSERT INTO query_rollups (span, start, provider, model, stage, n, sum_ms, max_ms, hist)
        SELECT 'minute', * FROM minutes
        UNION ALL
        SELECT 'hour', * FROM hours
        ON CONFLICT (span, start, provider, model, stage) DO UPDATE
        SET n = query_rollups.n + excluded.n, sum_ms = query_rollups.sum_ms + excluded.sum_ms,
            max_ms = greatest(query_rollups.max_ms, excluded.max_ms),
            hist = rollup_hist_add(query_rollups.hist, excluded.hist)
        RETURNING 1
    )
    SELECT count(*) FROM ins
$$;
-- +goose StatementEnd

COMMENT ON COLUMN query_rollups.stage IS 'A stage name (queue, embed, ..., llm_decode), or a pseudo-stage: ttft (ttft_ms of answered queries), e2e (e2e_ms of every query: n counts queries), e2e_error and e2e_cancelled (e2e_ms of the queries with that status), share_queue, share_retrieval, share_llm_connect, share_llm_prefill, share_overhead (fractions of ttft_ms; sum_ms / n is the mean share) and tokens_prompt, tokens_cached (tokens of the queries whose provider reports cached tokens; sum_ms is their sum).';

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION stage_percentiles(since timestamptz, key uuid)
RETURNS TABLE (provider text, model text, stage text, n bigint, p50_ms numeric, p90_ms numeric,
               p95_ms numeric, p99_ms numeric, max_ms numeric)
LANGUAGE plpgsql STABLE AS $$
#variable_conflict use_column
BEGIN
    -- One branch or the other, each planned only when taken: planning the
    -- raw branch over every day partition cost more than reading the
    -- roll-ups (20-30 ms at 40 partitions).
    IF key IS NULL AND since < now() - interval '61 minutes' THEN
        RETURN QUERY
        SELECT x.provider, x.model, x.stage, x.n,
               round_ms(x.p[1]), round_ms(x.p[2]), round_ms(x.p[3]), round_ms(x.p[4]), round_ms(x.max_ms)
        FROM (
            SELECT r.provider, r.model, r.stage, sum(r.n)::bigint AS n,
                   rollup_percentiles(rollup_hist_sum(r.hist), ARRAY[0.5, 0.9, 0.95, 0.99]) AS p,
                   max(r.max_ms) AS max_ms
            FROM query_rollups_between(since, 'infinity') r
            WHERE NOT rollup_pseudo_stage(r.stage)
            GROUP BY r.provider, r.model, r.stage
        ) x
        ORDER BY x.provider, x.model,
                 coalesce(array_position(ARRAY['accept', 'queue', 'embed', 'search', 'rerank', 'assemble',
                                               'llm_connect', 'llm_prefill', 'llm_decode'], x.stage), 99),
                 x.stage;
    ELSE
        RETURN QUERY
        SELECT x.provider, x.model, x.stage, x.n,
               round_ms(x.p[1]), round_ms(x.p[2]), round_ms(x.p[3]), round_ms(x.p[4]), round_ms(x.max_ms)
        FROM (
            SELECT q.provider, q.model, s.name AS stage, count(*) AS n,
                   percentile_cont(ARRAY[0.5, 0.9, 0.95, 0.99]) WITHIN GROUP (ORDER BY s.duration_ms) AS p,
                   max(s.duration_ms) AS max_ms
            FROM query_stages s
            JOIN queries q ON q.id = s.query_id AND q.created_at = s.created_at
            WHERE s.created_at >= since AND q.created_at >= since AND (key IS NULL OR q.key_id = key)
            GROUP BY q.provider, q.model, s.name
        ) x
        ORDER BY x.provider, x.model,
                 coalesce(array_position(ARRAY['accept', 'queue', 'embed', 'search', 'rerank', 'assemble',
                                               'llm_connect', 'llm_prefill', 'llm_decode'], x.stage), 99),
                 x.stage;
    END IF;
END
$$;
-- +goose StatementEnd

COMMENT ON FUNCTION stage_percentiles(timestamptz, uuid) IS 'Per provider, model and stage, over the queries created at or after since and asked with API key key (NULL: every query): count and p50/p90/p95/p99/max duration in milliseconds (rounded to 0.001), in pipeline order. Exact from the raw rows for a since within the last 61 minutes or a key; from the roll-ups (query_rollups, to the minute, percentiles within 1 %) for longer windows of every key.';

TRUNCATE query_rollups;
SELECT rollup_fill('-infinity', 'infinity');

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION stage_percentiles(since timestamptz, key uuid)
RETURNS TABLE (provider text, model text, stage text, n bigint, p50_ms numeric, p90_ms numeric,
               p95_ms numeric, p99_ms numeric, max_ms numeric)
LANGUAGE sql STABLE AS $$
    WITH bounds AS (
        -- Whole hours from the first hour boundary at or after since, whole
        -- minutes before it (from since's minute).
        SELECT date_trunc('minute', since AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' AS minute_from,
               date_trunc('hour', (since AT TIME ZONE 'UTC') + interval '1 hour' - interval '1 microsecond') AT TIME ZONE 'UTC' AS hour_from
    ),
    rolled AS (
        SELECT r.provider, r.model, r.stage, sum(r.n)::bigint AS n,
               rollup_percentiles(rollup_hist_sum(r.hist), ARRAY[0.5, 0.9, 0.95, 0.99]) AS p,
               max(r.max_ms) AS max_ms
        FROM query_rollups r, bounds b
        WHERE key IS NULL AND since < now() - interval '61 minutes'
          AND r.stage NOT IN ('ttft', 'e2e', 'e2e_error', 'e2e_cancelled')
          AND ((r.span = 'hour' AND r.start >= b.hour_from)
               OR (r.span = 'minute' AND r.start >= b.minute_from AND r.start < b.hour_from))
        GROUP BY r.provider, r.model, r.stage
    ),
    raw AS (
        SELECT q.provider, q.model, s.name AS stage, count(*) AS n,
               percentile_cont(ARRAY[0.5, 0.9, 0.95, 0.99]) WITHIN GROUP (ORDER BY s.duration_ms) AS p,
               max(s.duration_ms) AS max_ms
        FROM query_stages s
        JOIN queries q ON q.id = s.query_id AND q.created_at = s.created_at
        WHERE NOT (key IS NULL AND since < now() - interval '61 minutes')
          AND s.created_at >= since AND q.created_at >= since AND (key IS NULL OR q.key_id = key)
        GROUP BY q.provider, q.model, s.name
    )
    SELECT x.provider, x.model, x.stage, x.n,
           round_ms(x.p[1]), round_ms(x.p[2]), round_ms(x.p[3]), round_ms(x.p[4]), round_ms(x.max_ms)
    FROM (SELECT * FROM rolled UNION ALL SELECT * FROM raw) x
    ORDER BY x.provider, x.model,
             coalesce(array_position(ARRAY['accept', 'queue', 'embed', 'search', 'rerank', 'assemble',
                                           'llm_connect', 'llm_prefill', 'llm_decode'], x.stage), 99),
             x.stage
$$;
-- +goose StatementEnd

COMMENT ON FUNCTION stage_percentiles(timestamptz, uuid) IS 'Per provider, model and stage, over the queries created at or after since and asked with API key key (NULL: every query): count and p50/p90/p95/p99/max duration in milliseconds (rounded to 0.001), in pipeline order. Exact from the raw rows for a since within the last 61 minutes or a key; from the roll-ups (query_rollups, to the minute, percentiles within 1 %) for longer windows of every key.';

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION rollup_fill(since timestamptz, until timestamptz) RETURNS bigint
LANGUAGE sql AS $$
    WITH durations AS (
        SELECT q.created_at, q.provider, q.model, s.name AS stage, s.duration_ms AS ms
        FROM query_stages s JOIN queries q ON q.id = s.query_id AND q.created_at = s.created_at
        WHERE s.created_at >= since AND s.created_at < until AND q.created_at >= since AND q.created_at < until
        UNION ALL
        SELECT created_at, provider, model, 'ttft', ttft_ms FROM queries
        WHERE created_at >= since AND created_at < until AND ttft_ms IS NOT NULL
        UNION ALL
        SELECT created_at, provider, model, 'e2e', e2e_ms FROM queries
        WHERE created_at >= since AND created_at < until
        UNION ALL
        SELECT created_at, provider, model, 'e2e_' || status, e2e_ms FROM queries
        WHERE created_at >= since AND created_at < until AND status <> 'ok'
    ),
    buckets AS (
        SELECT date_trunc('minute', created_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' AS start, provider, model, stage,
               rollup_bucket(ms) AS bucket, count(*) AS n, sum(ms) AS sum_ms, max(ms) AS max_ms
        FROM durations GROUP BY 1, 2, 3, 4, 5
    ),
    hour_buckets AS (
        SELECT date_trunc('hour', start AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' AS start, provider, model, stage, bucket,
               sum(n) AS n, sum(sum_ms) AS sum_ms, max(max_ms) AS max_ms
        FROM buckets GROUP BY 1, 2, 3, 4, 5
    ),
    minutes AS (
        SELECT start, provider, model, stage, sum(n)::bigint AS n, sum(sum_ms) AS sum_ms, max(max_ms) AS max_ms,
               rollup_hist_of(array_agg(bucket), array_agg(n::bigint)) AS hist
        FROM buckets GROUP BY 1, 2, 3, 4
    ),
    hours AS (
        SELECT start, provider, model, stage, sum(n)::bigint AS n, sum(sum_ms) AS sum_ms, max(max_ms) AS max_ms,
               rollup_hist_of(array_agg(bucket), array_agg(n::bigint)) AS hist
        FROM hour_buckets GROUP BY 1, 2, 3, 4
    ),
    ins AS (
        INSERT INTO query_rollups (span, start, provider, model, stage, n, sum_ms, max_ms, hist)
        SELECT 'minute', * FROM minutes
        UNION ALL
        SELECT 'hour', * FROM hours
        ON CONFLICT (span, start, provider, model, stage) DO UPDATE
        SET n = query_rollups.n + excluded.n, sum_ms = query_rollups.sum_ms + excluded.sum_ms,
            max_ms = greatest(query_rollups.max_ms, excluded.max_ms),
            hist = rollup_hist_add(query_rollups.hist, excluded.hist)
        RETURNING 1
    )
    SELECT count(*) FROM ins
$$;
-- +goose StatementEnd

COMMENT ON COLUMN query_rollups.stage IS 'A stage name (queue, embed, ..., llm_decode), or ttft (ttft_ms of answered queries), e2e (e2e_ms of every query: n counts queries) e2e_error and e2e_cancelled (e2e_ms of the queries with that status).';

DELETE FROM query_rollups WHERE stage LIKE 'share\_%' OR stage LIKE 'tokens\_%';
DROP FUNCTION rollup_pseudo_stage(text);
DROP FUNCTION query_rollups_between(timestamptz, timestamptz);
