-- Windows longer than an hour read the roll-ups (migration 0031) instead of
-- every raw row: stage_percentiles(since) for a since more than 61 minutes
-- ago (a minute of grace, so that "the last hour" asked by a client whose
-- clock runs ahead stays exact; and no key: the roll-ups do not keep the
-- key), and ttft_tail, whose rows are hours, always: at 100 million queries
-- a month an hour holds ~140k queries, too many to sort for every hour of a
-- dashboard's range. The last hour of stage_percentiles stays exact, from
-- the raw rows; roll-up percentiles are within 1 % (docs/recording.md,
-- "Roll-ups").
--
-- The shapes and rounding are those of migration 0020 (per provider and
-- model, milliseconds rounded to 0.001 as numeric).

-- +goose Up
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

CREATE OR REPLACE VIEW ttft_tail AS
SELECT x.hour, x.provider, x.model, x.queries, x.answered,
       round_ms(x.p[1]) AS ttft_p50_ms,
       round_ms(x.p[2]) AS ttft_p95_ms,
       round_ms(x.p[3]) AS ttft_p99_ms,
       round_share(x.p[3] / nullif(x.p[1], 0)) AS p99_over_p50
FROM (
    SELECT r.start AS hour,
           r.provider,
           r.model,
           (sum(r.n) FILTER (WHERE r.stage = 'e2e'))::bigint AS queries,
           coalesce(sum(r.n) FILTER (WHERE r.stage = 'ttft'), 0)::bigint AS answered,
           rollup_percentiles(rollup_hist_sum(r.hist) FILTER (WHERE r.stage = 'ttft'), ARRAY[0.5, 0.95, 0.99]) AS p
    FROM query_rollups r
    WHERE r.span = 'hour' AND r.stage IN ('e2e', 'ttft')
    GROUP BY 1, 2, 3
) x;

COMMENT ON VIEW ttft_tail IS 'Per UTC hour, provider and model: queries, answered (with a first token), TTFT p50/p95/p99 in milliseconds (rounded to 0.001) and p99/p50; a ratio of 5 or more is the bimodal signature of head-of-line blocking. Read from the hourly roll-ups (query_rollups, up to date with every recorder batch): percentiles within 1 % of exact. Filter on hour.';

-- +goose Down
CREATE OR REPLACE VIEW ttft_tail AS
SELECT x.hour, x.provider, x.model, x.queries, x.answered,
       round_ms(x.p[1]) AS ttft_p50_ms,
       round_ms(x.p[2]) AS ttft_p95_ms,
       round_ms(x.p[3]) AS ttft_p99_ms,
       round_share(x.p[3] / nullif(x.p[1], 0)) AS p99_over_p50
FROM (
    SELECT date_trunc('hour', created_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' AS hour,
           provider,
           model,
           count(*) AS queries,
           count(ttft_ms) AS answered,
           percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP (ORDER BY ttft_ms) AS p
    FROM queries
    GROUP BY 1, 2, 3
) x;

COMMENT ON VIEW ttft_tail IS 'Per UTC hour, provider and model: queries, answered (with a first token), TTFT p50/p95/p99 in milliseconds (rounded to 0.001) and p99/p50; a ratio of 5 or more is the bimodal signature of head-of-line blocking. Filter on hour.';

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION stage_percentiles(since timestamptz, key uuid)
RETURNS TABLE (provider text, model text, stage text, n bigint, p50_ms numeric, p90_ms numeric,
               p95_ms numeric, p99_ms numeric, max_ms numeric)
LANGUAGE sql STABLE AS $$
    SELECT x.provider, x.model, x.stage, x.n,
           round_ms(x.p[1]), round_ms(x.p[2]), round_ms(x.p[3]), round_ms(x.p[4]), round_ms(x.max_ms)
    FROM (
        SELECT q.provider, q.model, s.name AS stage, count(*) AS n,
               percentile_cont(ARRAY[0.5, 0.9, 0.95, 0.99]) WITHIN GROUP (ORDER BY s.duration_ms) AS p,
               max(s.duration_ms) AS max_ms
        FROM query_stages s
        JOIN queries q ON q.id = s.query_id AND q.created_at >= since
        WHERE s.created_at >= since AND (key IS NULL OR q.key_id = key)
        GROUP BY q.provider, q.model, s.name
    ) x
    ORDER BY x.provider, x.model,
             coalesce(array_position(ARRAY['accept', 'queue', 'embed', 'search', 'rerank', 'assemble',
                                           'llm_connect', 'llm_prefill', 'llm_decode'], x.stage), 99),
             x.stage
$$;
-- +goose StatementEnd

COMMENT ON FUNCTION stage_percentiles(timestamptz, uuid) IS 'Per provider, model and stage, over the queries created at or after since and asked with API key key (NULL: every query): count and p50/p90/p95/p99/max duration in milliseconds (rounded to 0.001), in pipeline order.';
