-- Every dashboard view tells models apart, rounds its milliseconds, and calls
-- the query id query_id.
--
-- An extractive answer (3 ms, no model) and a hosted model's (150 ms) used to
-- share one p50 in topk_tradeoff and stage_percentiles; the hourly views
-- grouped by model alone or by provider alone. Now each aggregate is grouped
-- by provider and model (filter on them: WHERE provider = ... AND model = ...).
--
-- Milliseconds come back as numeric rounded to 0.001 ms (a microsecond, the
-- clock's resolution) by round_ms, instead of 3.8606499999999997 or
-- 108.0000000000000000; shares and rates are rounded to 0.0001.
--
-- network_health keeps out the providers that make no network call:
-- extractive answers in-process, so its queries have no connection to be
-- healthy or not (llmsim is reached over HTTP as provider openai and stays).
--
-- ttft_breakdown and slow_queries call the query id query_id, as the API's
-- JSON (GET /v1/queries, /v1/stats) and the pages do.
--
-- The filter keeps working through the functions: they are single-statement
-- SQL functions, which the planner inlines, so a WHERE on provider or model
-- is pushed below their GROUP BY.

-- +goose Up

-- +goose StatementBegin
CREATE FUNCTION round_ms(ms double precision) RETURNS numeric
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT round(ms::numeric, 3)
$$;
-- +goose StatementEnd

COMMENT ON FUNCTION round_ms(double precision) IS 'Milliseconds rounded to 0.001 ms (one microsecond), as numeric: what every dashboard view returns.';

-- +goose StatementBegin
CREATE FUNCTION round_share(x double precision) RETURNS numeric
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT round(x::numeric, 4)
$$;
-- +goose StatementEnd

COMMENT ON FUNCTION round_share(double precision) IS 'A fraction (0..1) or ratio rounded to 0.0001, as numeric.';

DROP VIEW topk_tradeoff;
DROP FUNCTION topk_tradeoff(timestamptz);
DROP FUNCTION topk_tradeoff(timestamptz, uuid);
DROP FUNCTION stage_percentiles(timestamptz);
DROP FUNCTION stage_percentiles(timestamptz, uuid);
DROP VIEW ttft_tail;
DROP VIEW cache_hit_rate;
DROP VIEW network_health;
DROP VIEW slow_queries;
DROP VIEW ttft_breakdown;
DROP VIEW sweep_results;

-- +goose StatementBegin
CREATE FUNCTION stage_percentiles(since timestamptz, key uuid)
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

-- +goose StatementBegin
CREATE FUNCTION stage_percentiles(since timestamptz)
RETURNS TABLE (provider text, model text, stage text, n bigint, p50_ms numeric, p90_ms numeric,
               p95_ms numeric, p99_ms numeric, max_ms numeric)
LANGUAGE sql STABLE AS $$
    SELECT * FROM stage_percentiles(since, NULL::uuid)
$$;
-- +goose StatementEnd

COMMENT ON FUNCTION stage_percentiles(timestamptz, uuid) IS 'Per provider, model and stage, over the queries created at or after since and asked with API key key (NULL: every query): count and p50/p90/p95/p99/max duration in milliseconds (rounded to 0.001), in pipeline order.';
COMMENT ON FUNCTION stage_percentiles(timestamptz) IS 'stage_percentiles(since, NULL): every caller''s queries.';

-- +goose StatementBegin
CREATE FUNCTION topk_tradeoff(since timestamptz, key uuid)
RETURNS TABLE (provider text, model text, top_k integer, queries bigint, ok bigint,
               ttft_p50_ms numeric, ttft_p95_ms numeric, retrieval_p50_ms numeric, llm_prefill_p50_ms numeric,
               prompt_tokens_mean numeric, retrieval_share_mean numeric)
LANGUAGE sql STABLE AS $$
    SELECT x.provider, x.model, x.top_k, x.queries, x.ok,
           round_ms(x.ttft[1]), round_ms(x.ttft[2]), round_ms(x.retrieval_p50), round_ms(x.prefill_p50),
           round(x.prompt_tokens_mean, 3), round_share(x.retrieval_share_mean)
    FROM (
        SELECT q.provider, q.model, q.top_k,
               count(*) AS queries,
               count(*) FILTER (WHERE q.status = 'ok') AS ok,
               percentile_cont(ARRAY[0.5, 0.95]) WITHIN GROUP (ORDER BY q.ttft_ms) FILTER (WHERE q.status = 'ok') AS ttft,
               percentile_cont(0.5) WITHIN GROUP (ORDER BY q.retrieval_ms) FILTER (WHERE q.status = 'ok') AS retrieval_p50,
               percentile_cont(0.5) WITHIN GROUP (ORDER BY q.llm_prefill_ms) FILTER (WHERE q.status = 'ok') AS prefill_p50,
               avg(q.prompt_tokens) FILTER (WHERE q.status = 'ok') AS prompt_tokens_mean,
               avg(q.retrieval_share) FILTER (WHERE q.status = 'ok') AS retrieval_share_mean
        FROM queries q
        WHERE q.created_at >= since AND (key IS NULL OR q.key_id = key)
        GROUP BY q.provider, q.model, q.top_k
    ) x
    ORDER BY x.provider, x.model, x.top_k
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION topk_tradeoff(since timestamptz)
RETURNS TABLE (provider text, model text, top_k integer, queries bigint, ok bigint,
               ttft_p50_ms numeric, ttft_p95_ms numeric, retrieval_p50_ms numeric, llm_prefill_p50_ms numeric,
               prompt_tokens_mean numeric, retrieval_share_mean numeric)
LANGUAGE sql STABLE AS $$
    SELECT * FROM topk_tradeoff(since, NULL::uuid)
$$;
-- +goose StatementEnd

COMMENT ON FUNCTION topk_tradeoff(timestamptz, uuid) IS 'Per provider, model and top_k, over the queries created at or after since and asked with API key key (NULL: every query): queries, ok, and over the ok ones TTFT p50/p95, retrieval p50, llm_prefill p50 (milliseconds, rounded to 0.001), mean prompt tokens and mean retrieval share.';
COMMENT ON FUNCTION topk_tradeoff(timestamptz) IS 'topk_tradeoff(since, NULL): every caller''s queries.';

CREATE VIEW topk_tradeoff AS
SELECT * FROM topk_tradeoff(now() - interval '24 hours');

COMMENT ON VIEW topk_tradeoff IS 'topk_tradeoff(since) over the last 24 hours; call the function for another window.';

CREATE VIEW ttft_tail AS
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

CREATE VIEW cache_hit_rate AS
SELECT date_trunc('hour', created_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' AS hour,
       provider,
       model,
       count(*) AS queries,
       sum(prompt_tokens) AS prompt_tokens,
       sum(cached_tokens) AS cached_tokens,
       round_share(sum(cached_tokens)::double precision / nullif(sum(prompt_tokens) FILTER (WHERE cached_tokens IS NOT NULL), 0)) AS hit_rate,
       count(*) FILTER (WHERE cached_tokens IS NULL) AS unknown_queries
FROM queries
GROUP BY 1, 2, 3;

COMMENT ON VIEW cache_hit_rate IS 'Per UTC hour, provider and model: prompt tokens, prompt tokens served from the provider''s prefix cache, and their ratio over the queries whose provider reported cached tokens (NULL when none did, e.g. Ollama: unknown, not 0 %); unknown_queries counts the others. Filter on hour.';

CREATE VIEW network_health AS
SELECT date_trunc('hour', created_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' AS hour,
       provider,
       model,
       count(conn_reused) AS llm_calls,
       round_share(avg(conn_reused::int)::double precision) AS reused_share,
       round_ms(percentile_cont(0.5) WITHIN GROUP (ORDER BY gen_ttft_ms - llm_prefill_ms) FILTER (WHERE conn_reused IS NOT NULL)) AS llm_connect_p50_ms,
       round_ms(percentile_cont(0.95) WITHIN GROUP (ORDER BY gen_ttft_ms - llm_prefill_ms) FILTER (WHERE conn_reused IS NOT NULL)) AS llm_connect_p95_ms,
       round_ms(percentile_cont(0.95) WITHIN GROUP (ORDER BY gen_ttft_ms - llm_prefill_ms) FILTER (WHERE NOT conn_reused)) AS new_conn_connect_p95_ms,
       count(*) FILTER (WHERE upstream_status >= 400) AS upstream_errors
FROM queries
WHERE provider NOT IN ('extractive')
GROUP BY 1, 2, 3;

COMMENT ON VIEW network_health IS 'Per UTC hour, provider and model, for the providers reached over the network (not extractive, which answers in-process): LLM calls, the share that reused a keep-alive connection, llm_connect p50/p95 in milliseconds (all calls, and p95 of new connections alone; rounded to 0.001) and upstream HTTP errors. llm_connect is gen_ttft_ms - llm_prefill_ms. Filter on hour.';

CREATE VIEW slow_queries AS
SELECT q.id AS query_id,
       q.created_at,
       q.provider,
       q.model,
       q.status,
       q.error_code,
       q.top_k,
       round_ms(q.ttft_ms) AS ttft_ms,
       round_ms(q.e2e_ms) AS e2e_ms,
       round_ms(q.retrieval_ms) AS retrieval_ms,
       round_ms(q.llm_prefill_ms) AS llm_prefill_ms,
       round_share(q.retrieval_share) AS retrieval_share,
       round_share(q.prefill_share) AS prefill_share,
       (SELECT s.name FROM query_stages s WHERE s.query_id = q.id AND s.name <> 'llm_decode'
        ORDER BY s.duration_ms DESC, s.seq LIMIT 1) AS dominant_stage,
       (SELECT round_ms(s.duration_ms) FROM query_stages s WHERE s.query_id = q.id AND s.name <> 'llm_decode'
        ORDER BY s.duration_ms DESC, s.seq LIMIT 1) AS dominant_ms,
       left(q.question, 200) AS question
FROM queries q;

COMMENT ON VIEW slow_queries IS 'Every query (query_id) with its dominant stage (the longest before the first token) and its duration in milliseconds (rounded to 0.001). Read it for a window, slowest first: WHERE created_at >= now() - interval ''1 hour'' ORDER BY ttft_ms DESC NULLS LAST LIMIT 20.';

CREATE VIEW ttft_breakdown AS
SELECT
    id AS query_id,
    created_at,
    provider,
    model,
    status,
    top_k,
    rerank_top_n,
    round_ms(queue_ms) AS queue_ms,
    round_ms(ttft_ms) AS ttft_ms,
    round_ms(retrieval_ms) AS retrieval_ms,
    round_ms(gen_ttft_ms) AS gen_ttft_ms,
    round_ms(llm_prefill_ms) AS llm_prefill_ms,
    round_ms(overhead_ms) AS overhead_ms,
    round_share(retrieval_share) AS retrieval_share,
    round_share(prefill_share) AS prefill_share,
    round_ms(e2e_ms) AS e2e_ms,
    prompt_tokens,
    cached_tokens
FROM queries;

COMMENT ON VIEW ttft_breakdown IS 'Where each query''s TTFT went: ttft_ms = queue_ms + retrieval_ms + gen_ttft_ms + overhead_ms (+ accept_ms and reasoning_ms of queries), in milliseconds rounded to 0.001; shares are fractions of ttft_ms.';

CREATE VIEW sweep_results AS
WITH timing AS (
    SELECT
        sweep_id,
        provider,
        model,
        top_k,
        rerank_top_n,
        max_context_tokens,
        count(*) AS queries,
        count(*) FILTER (WHERE status = 'ok') AS ok,
        count(*) FILTER (WHERE status <> 'ok') AS failed,
        percentile_cont(0.5) WITHIN GROUP (ORDER BY ttft_ms) FILTER (WHERE status = 'ok') AS ttft_p50_ms,
        percentile_cont(0.95) WITHIN GROUP (ORDER BY ttft_ms) FILTER (WHERE status = 'ok') AS ttft_p95_ms,
        percentile_cont(0.5) WITHIN GROUP (ORDER BY retrieval_ms) FILTER (WHERE status = 'ok') AS retrieval_p50_ms,
        percentile_cont(0.5) WITHIN GROUP (ORDER BY llm_prefill_ms) FILTER (WHERE status = 'ok') AS llm_prefill_p50_ms,
        avg(prompt_tokens) FILTER (WHERE status = 'ok') AS prompt_tokens_mean,
        percentile_cont(0.5) WITHIN GROUP (ORDER BY retrieval_share) FILTER (WHERE status = 'ok') AS retrieval_share_p50
    FROM queries
    WHERE sweep_id IS NOT NULL
    GROUP BY sweep_id, provider, model, top_k, rerank_top_n, max_context_tokens
)
SELECT
    t.sweep_id,
    s.created_at AS sweep_created_at,
    s.status AS sweep_status,
    t.provider,
    t.model,
    t.top_k,
    t.rerank_top_n,
    t.max_context_tokens,
    t.queries,
    t.ok,
    t.failed,
    round_ms(t.ttft_p50_ms) AS ttft_p50_ms,
    round_ms(t.ttft_p95_ms) AS ttft_p95_ms,
    round_ms(t.retrieval_p50_ms) AS retrieval_p50_ms,
    round_ms(t.llm_prefill_p50_ms) AS llm_prefill_p50_ms,
    round(t.prompt_tokens_mean, 3) AS prompt_tokens_mean,
    round_share(t.retrieval_share_p50) AS retrieval_share_p50,
    q.hit_rate,
    q.recall,
    q.mrr
FROM timing t
JOIN sweeps s ON s.id = t.sweep_id
LEFT JOIN LATERAL (
    SELECT x.hit_rate, x.recall, x.mrr
    FROM jsonb_to_recordset(coalesce(s.summary -> 'settings', '[]'::jsonb))
        AS x(top_k integer, rerank_top_n integer, max_context_tokens integer,
             hit_rate double precision, recall double precision, mrr double precision)
    WHERE x.top_k = t.top_k AND x.rerank_top_n = t.rerank_top_n
      -- a setting without a budget ran under the server's own, whatever it was
      AND (x.max_context_tokens IS NULL OR x.max_context_tokens = t.max_context_tokens)
    LIMIT 1
) q ON true;

COMMENT ON VIEW sweep_results IS 'Per sweep, provider, model and setting (top_k, rerank_top_n, max_context_tokens): timing figures computed from the tagged queries (milliseconds rounded to 0.001; percentiles interpolate linearly; failed queries excluded) and, from the sweep''s summary, the relevance figures of the context''s documents (hit_rate, recall, mrr: fractions 0..1, NULL without relevance labels).';

-- +goose Down
DROP VIEW sweep_results;
DROP VIEW ttft_breakdown;
DROP VIEW slow_queries;
DROP VIEW network_health;
DROP VIEW cache_hit_rate;
DROP VIEW ttft_tail;
DROP VIEW topk_tradeoff;
DROP FUNCTION topk_tradeoff(timestamptz);
DROP FUNCTION topk_tradeoff(timestamptz, uuid);
DROP FUNCTION stage_percentiles(timestamptz);
DROP FUNCTION stage_percentiles(timestamptz, uuid);

-- +goose StatementBegin
CREATE FUNCTION stage_percentiles(since timestamptz, key uuid)
RETURNS TABLE (stage text, n bigint, p50_ms double precision, p90_ms double precision,
               p95_ms double precision, p99_ms double precision, max_ms double precision)
LANGUAGE sql STABLE AS $$
    SELECT s.name,
           count(*),
           (percentile_cont(ARRAY[0.5, 0.9, 0.95, 0.99]) WITHIN GROUP (ORDER BY s.duration_ms))[1],
           (percentile_cont(ARRAY[0.5, 0.9, 0.95, 0.99]) WITHIN GROUP (ORDER BY s.duration_ms))[2],
           (percentile_cont(ARRAY[0.5, 0.9, 0.95, 0.99]) WITHIN GROUP (ORDER BY s.duration_ms))[3],
           (percentile_cont(ARRAY[0.5, 0.9, 0.95, 0.99]) WITHIN GROUP (ORDER BY s.duration_ms))[4],
           max(s.duration_ms)
    FROM query_stages s
    WHERE s.created_at >= since
      AND (key IS NULL OR s.query_id IN (SELECT q.id FROM queries q WHERE q.key_id = key AND q.created_at >= since))
    GROUP BY s.name
    ORDER BY coalesce(array_position(ARRAY['queue', 'embed', 'search', 'rerank', 'assemble',
                                           'llm_connect', 'llm_prefill', 'llm_decode'], s.name), 99),
             s.name
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION stage_percentiles(since timestamptz)
RETURNS TABLE (stage text, n bigint, p50_ms double precision, p90_ms double precision,
               p95_ms double precision, p99_ms double precision, max_ms double precision)
LANGUAGE sql STABLE AS $$
    SELECT * FROM stage_percentiles(since, NULL::uuid)
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION topk_tradeoff(since timestamptz, key uuid)
RETURNS TABLE (top_k integer, queries bigint, ok bigint, ttft_p50_ms double precision, ttft_p95_ms double precision,
               retrieval_p50_ms double precision, llm_prefill_p50_ms double precision,
               prompt_tokens_mean double precision, retrieval_share_mean double precision)
LANGUAGE sql STABLE AS $$
    SELECT q.top_k,
           count(*),
           count(*) FILTER (WHERE q.status = 'ok'),
           (percentile_cont(ARRAY[0.5, 0.95]) WITHIN GROUP (ORDER BY q.ttft_ms) FILTER (WHERE q.status = 'ok'))[1],
           (percentile_cont(ARRAY[0.5, 0.95]) WITHIN GROUP (ORDER BY q.ttft_ms) FILTER (WHERE q.status = 'ok'))[2],
           percentile_cont(0.5) WITHIN GROUP (ORDER BY q.retrieval_ms) FILTER (WHERE q.status = 'ok'),
           percentile_cont(0.5) WITHIN GROUP (ORDER BY q.llm_prefill_ms) FILTER (WHERE q.status = 'ok'),
           avg(q.prompt_tokens) FILTER (WHERE q.status = 'ok')::double precision,
           avg(q.retrieval_share) FILTER (WHERE q.status = 'ok')
    FROM queries q
    WHERE q.created_at >= since AND (key IS NULL OR q.key_id = key)
    GROUP BY q.top_k
    ORDER BY q.top_k
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION topk_tradeoff(since timestamptz)
RETURNS TABLE (top_k integer, queries bigint, ok bigint, ttft_p50_ms double precision, ttft_p95_ms double precision,
               retrieval_p50_ms double precision, llm_prefill_p50_ms double precision,
               prompt_tokens_mean double precision, retrieval_share_mean double precision)
LANGUAGE sql STABLE AS $$
    SELECT * FROM topk_tradeoff(since, NULL::uuid)
$$;
-- +goose StatementEnd

CREATE VIEW topk_tradeoff AS
SELECT * FROM topk_tradeoff(now() - interval '24 hours');

CREATE VIEW ttft_tail AS
SELECT date_trunc('hour', created_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' AS hour,
       model,
       count(*) AS queries,
       count(ttft_ms) AS answered,
       (percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP (ORDER BY ttft_ms))[1] AS ttft_p50_ms,
       (percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP (ORDER BY ttft_ms))[2] AS ttft_p95_ms,
       (percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP (ORDER BY ttft_ms))[3] AS ttft_p99_ms,
       (percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP (ORDER BY ttft_ms))[3]
         / nullif((percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP (ORDER BY ttft_ms))[1], 0) AS p99_over_p50
FROM queries
GROUP BY 1, 2;

CREATE VIEW cache_hit_rate AS
SELECT date_trunc('hour', created_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' AS hour,
       model,
       count(*) AS queries,
       sum(prompt_tokens) AS prompt_tokens,
       sum(cached_tokens) AS cached_tokens,
       sum(cached_tokens)::double precision / nullif(sum(prompt_tokens) FILTER (WHERE cached_tokens IS NOT NULL), 0) AS hit_rate,
       count(*) FILTER (WHERE cached_tokens IS NULL) AS unknown_queries
FROM queries
GROUP BY 1, 2;

CREATE VIEW network_health AS
SELECT date_trunc('hour', created_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' AS hour,
       provider,
       count(conn_reused) AS llm_calls,
       avg(conn_reused::int)::double precision AS reused_share,
       percentile_cont(0.5) WITHIN GROUP (ORDER BY gen_ttft_ms - llm_prefill_ms) FILTER (WHERE conn_reused IS NOT NULL) AS llm_connect_p50_ms,
       percentile_cont(0.95) WITHIN GROUP (ORDER BY gen_ttft_ms - llm_prefill_ms) FILTER (WHERE conn_reused IS NOT NULL) AS llm_connect_p95_ms,
       percentile_cont(0.95) WITHIN GROUP (ORDER BY gen_ttft_ms - llm_prefill_ms) FILTER (WHERE NOT conn_reused) AS new_conn_connect_p95_ms,
       count(*) FILTER (WHERE upstream_status >= 400) AS upstream_errors
FROM queries
GROUP BY 1, 2;

CREATE VIEW slow_queries AS
SELECT q.id,
       q.created_at,
       q.model,
       q.status,
       q.error_code,
       q.top_k,
       q.ttft_ms,
       q.e2e_ms,
       q.retrieval_ms,
       q.llm_prefill_ms,
       q.retrieval_share,
       q.prefill_share,
       (SELECT s.name FROM query_stages s WHERE s.query_id = q.id AND s.name <> 'llm_decode'
        ORDER BY s.duration_ms DESC, s.seq LIMIT 1) AS dominant_stage,
       (SELECT s.duration_ms FROM query_stages s WHERE s.query_id = q.id AND s.name <> 'llm_decode'
        ORDER BY s.duration_ms DESC, s.seq LIMIT 1) AS dominant_ms,
       left(q.question, 200) AS question
FROM queries q;

CREATE VIEW ttft_breakdown AS
SELECT
    id,
    created_at,
    model,
    provider,
    status,
    top_k,
    rerank_top_n,
    queue_ms,
    ttft_ms,
    retrieval_ms,
    gen_ttft_ms,
    llm_prefill_ms,
    overhead_ms,
    retrieval_share,
    prefill_share,
    e2e_ms,
    prompt_tokens,
    cached_tokens
FROM queries;

CREATE VIEW sweep_results AS
WITH timing AS (
    SELECT
        sweep_id,
        top_k,
        rerank_top_n,
        max_context_tokens,
        count(*) AS queries,
        count(*) FILTER (WHERE status = 'ok') AS ok,
        count(*) FILTER (WHERE status <> 'ok') AS failed,
        percentile_cont(0.5) WITHIN GROUP (ORDER BY ttft_ms) FILTER (WHERE status = 'ok') AS ttft_p50_ms,
        percentile_cont(0.95) WITHIN GROUP (ORDER BY ttft_ms) FILTER (WHERE status = 'ok') AS ttft_p95_ms,
        percentile_cont(0.5) WITHIN GROUP (ORDER BY retrieval_ms) FILTER (WHERE status = 'ok') AS retrieval_p50_ms,
        percentile_cont(0.5) WITHIN GROUP (ORDER BY llm_prefill_ms) FILTER (WHERE status = 'ok') AS llm_prefill_p50_ms,
        avg(prompt_tokens) FILTER (WHERE status = 'ok') AS prompt_tokens_mean,
        percentile_cont(0.5) WITHIN GROUP (ORDER BY retrieval_share) FILTER (WHERE status = 'ok') AS retrieval_share_p50
    FROM queries
    WHERE sweep_id IS NOT NULL
    GROUP BY sweep_id, top_k, rerank_top_n, max_context_tokens
)
SELECT
    t.sweep_id,
    s.created_at AS sweep_created_at,
    s.status AS sweep_status,
    t.top_k,
    t.rerank_top_n,
    t.max_context_tokens,
    t.queries,
    t.ok,
    t.failed,
    t.ttft_p50_ms,
    t.ttft_p95_ms,
    t.retrieval_p50_ms,
    t.llm_prefill_p50_ms,
    t.prompt_tokens_mean,
    t.retrieval_share_p50,
    q.hit_rate,
    q.recall,
    q.mrr
FROM timing t
JOIN sweeps s ON s.id = t.sweep_id
LEFT JOIN LATERAL (
    SELECT x.hit_rate, x.recall, x.mrr
    FROM jsonb_to_recordset(coalesce(s.summary -> 'settings', '[]'::jsonb))
        AS x(top_k integer, rerank_top_n integer, max_context_tokens integer,
             hit_rate double precision, recall double precision, mrr double precision)
    WHERE x.top_k = t.top_k AND x.rerank_top_n = t.rerank_top_n
      AND (x.max_context_tokens IS NULL OR x.max_context_tokens = t.max_context_tokens)
    LIMIT 1
) q ON true;

DROP FUNCTION round_share(double precision);
DROP FUNCTION round_ms(double precision);
