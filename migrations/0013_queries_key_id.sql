-- Each query remembers the API key it was asked with, so that a key reads
-- its own queries (GET /v1/queries, /v1/queries/:id, /v1/stats) and an admin
-- key reads them all. No foreign key: keys are never deleted (only revoked),
-- and the recorder's batched inserts stay free of a lookup per row.
--
-- stage_percentiles and topk_tradeoff get a second argument, the key whose
-- queries to aggregate (NULL: every query); the one-argument forms the
-- dashboards call stay, as calls of the two-argument form with NULL.

-- +goose Up
ALTER TABLE queries ADD COLUMN key_id uuid NULL;
CREATE INDEX queries_key_id_created_at_idx ON queries (key_id, created_at DESC, id DESC) WHERE key_id IS NOT NULL;

COMMENT ON COLUMN queries.key_id IS 'The API key the query was asked with (api_keys.id); NULL when the server ran without keys, or for in-process callers (sweep).';

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
CREATE OR REPLACE FUNCTION stage_percentiles(since timestamptz)
RETURNS TABLE (stage text, n bigint, p50_ms double precision, p90_ms double precision,
               p95_ms double precision, p99_ms double precision, max_ms double precision)
LANGUAGE sql STABLE AS $$
    SELECT * FROM stage_percentiles(since, NULL::uuid)
$$;
-- +goose StatementEnd

COMMENT ON FUNCTION stage_percentiles(timestamptz, uuid) IS 'Per stage, over the queries created at or after since and asked with API key key (NULL: every query): count and p50/p90/p95/p99/max duration in milliseconds, in pipeline order.';

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
CREATE OR REPLACE FUNCTION topk_tradeoff(since timestamptz)
RETURNS TABLE (top_k integer, queries bigint, ok bigint, ttft_p50_ms double precision, ttft_p95_ms double precision,
               retrieval_p50_ms double precision, llm_prefill_p50_ms double precision,
               prompt_tokens_mean double precision, retrieval_share_mean double precision)
LANGUAGE sql STABLE AS $$
    SELECT * FROM topk_tradeoff(since, NULL::uuid)
$$;
-- +goose StatementEnd

COMMENT ON FUNCTION topk_tradeoff(timestamptz, uuid) IS 'Per top_k, over the queries created at or after since and asked with API key key (NULL: every query): queries, ok, and over the ok ones TTFT p50/p95, retrieval p50, llm_prefill p50 (milliseconds), mean prompt tokens and mean retrieval share.';

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION stage_percentiles(since timestamptz)
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
    GROUP BY s.name
    ORDER BY coalesce(array_position(ARRAY['queue', 'embed', 'search', 'rerank', 'assemble',
                                           'llm_connect', 'llm_prefill', 'llm_decode'], s.name), 99),
             s.name
$$;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION topk_tradeoff(since timestamptz)
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
DROP FUNCTION topk_tradeoff(timestamptz, uuid);
DROP FUNCTION stage_percentiles(timestamptz, uuid);
DROP INDEX queries_key_id_created_at_idx;
ALTER TABLE queries DROP COLUMN key_id;
