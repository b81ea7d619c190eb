-- The views a dashboard reads: percentiles per stage, the TTFT tail, the
-- top-k trade-off, the prefix-cache hit rate, network health and the slowest
-- queries. Times are milliseconds; shares and rates are fractions (0..1);
-- "hour" is the start of a UTC hour. docs/sql.md has an example per view.

-- +goose Up

-- +goose StatementBegin
CREATE FUNCTION stage_percentiles(since timestamptz)
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
    FROM queries q
    JOIN query_stages s ON s.query_id = q.id
    WHERE q.created_at >= since
    GROUP BY s.name
    ORDER BY coalesce(array_position(ARRAY['queue', 'embed', 'search', 'rerank', 'assemble',
                                           'llm_connect', 'llm_prefill', 'llm_decode'], s.name), 99),
             s.name
$$;
-- +goose StatementEnd

COMMENT ON FUNCTION stage_percentiles(timestamptz) IS 'Per stage, over the queries created at or after since: count and p50/p90/p95/p99/max duration in milliseconds, in pipeline order.';

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

COMMENT ON VIEW ttft_tail IS 'Per UTC hour and model: queries, answered (with a first token), TTFT p50/p95/p99 in milliseconds and p99/p50; a ratio of 5 or more is the bimodal signature of head-of-line blocking. Filter on hour.';

-- +goose StatementBegin
CREATE FUNCTION topk_tradeoff(since timestamptz)
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
    WHERE q.created_at >= since
    GROUP BY q.top_k
    ORDER BY q.top_k
$$;
-- +goose StatementEnd

COMMENT ON FUNCTION topk_tradeoff(timestamptz) IS 'Per top_k, over the queries created at or after since: queries, ok, and over the ok ones TTFT p50/p95, retrieval p50, llm_prefill p50 (milliseconds), mean prompt tokens and mean retrieval share.';

CREATE VIEW topk_tradeoff AS
SELECT * FROM topk_tradeoff(now() - interval '24 hours');

COMMENT ON VIEW topk_tradeoff IS 'topk_tradeoff(since) over the last 24 hours; call the function for another window.';

CREATE VIEW cache_hit_rate AS
SELECT date_trunc('hour', created_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' AS hour,
       model,
       count(*) AS queries,
       sum(prompt_tokens) AS prompt_tokens,
       sum(cached_tokens) AS cached_tokens,
       sum(cached_tokens)::double precision / nullif(sum(prompt_tokens), 0) AS hit_rate
FROM queries
GROUP BY 1, 2;

COMMENT ON VIEW cache_hit_rate IS 'Per UTC hour and model: prompt tokens, prompt tokens served from the provider''s prefix cache, and their ratio (NULL without prompt tokens). Filter on hour.';

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

COMMENT ON VIEW network_health IS 'Per UTC hour and provider: LLM calls, the share that reused a keep-alive connection, llm_connect p50/p95 in milliseconds (all calls, and p95 of new connections alone) and upstream HTTP errors. llm_connect is gen_ttft_ms - llm_prefill_ms. Filter on hour.';

-- The dominant stage is the longest stage before the first token (llm_decode
-- comes after it). The scalar subqueries run only for the rows a query keeps,
-- after its ORDER BY ... LIMIT, not for every row of the window.
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

COMMENT ON VIEW slow_queries IS 'Every query with its dominant stage (the longest before the first token) and its duration in milliseconds. Read it for a window, slowest first: WHERE created_at >= now() - interval ''1 hour'' ORDER BY ttft_ms DESC NULLS LAST LIMIT 20.';

-- +goose Down
DROP VIEW slow_queries;
DROP VIEW network_health;
DROP VIEW cache_hit_rate;
DROP VIEW topk_tradeoff;
DROP FUNCTION topk_tradeoff(timestamptz);
DROP VIEW ttft_tail;
DROP FUNCTION stage_percentiles(timestamptz);
