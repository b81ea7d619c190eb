-- sweep_results groups a sweep's queries by their TTFT budget as well as by
-- setting (issue 33): `ragtime sweep --ttft-budgets` asks a budget at the
-- largest top_k, which the view pooled with the fixed setting of the same
-- top_k (timings of both in one row, and the fixed setting's recall).

-- +goose Up
DROP VIEW sweep_results;

CREATE VIEW sweep_results AS
WITH timing AS (
    SELECT
        sweep_id,
        provider,
        model,
        retrieval,
        top_k,
        rerank_top_n,
        max_context_tokens,
        ttft_budget_ms,
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
    GROUP BY sweep_id, provider, model, retrieval, top_k, rerank_top_n, max_context_tokens, ttft_budget_ms
)
SELECT
    t.sweep_id,
    s.created_at AS sweep_created_at,
    s.status AS sweep_status,
    t.provider,
    t.model,
    t.retrieval,
    t.top_k,
    t.rerank_top_n,
    t.max_context_tokens,
    round_ms(t.ttft_budget_ms) AS ttft_budget_ms,
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
        AS x(top_k integer, rerank_top_n integer, max_context_tokens integer, retrieval text, ttft_budget_ms double precision,
             hit_rate double precision, recall double precision, mrr double precision)
    WHERE x.top_k = t.top_k AND x.rerank_top_n = t.rerank_top_n
      -- a setting without a budget ran under the server's own, whatever it was
      AND (x.max_context_tokens IS NULL OR x.max_context_tokens = t.max_context_tokens)
      -- a setting without a mode ran under the server's default, which the
      -- queries record
      AND (x.retrieval IS NULL OR x.retrieval IS NOT DISTINCT FROM t.retrieval)
      -- a setting without a budget ran under the server's own, if any; a
      -- setting with one is its own row, never the fixed top_k's
      AND (x.ttft_budget_ms IS NULL OR x.ttft_budget_ms = t.ttft_budget_ms)
    ORDER BY x.ttft_budget_ms IS NOT DISTINCT FROM t.ttft_budget_ms DESC
    LIMIT 1
) q ON true;

COMMENT ON VIEW sweep_results IS 'Per sweep, provider, model and setting (retrieval mode, top_k, rerank_top_n, max_context_tokens, ttft_budget_ms; retrieval is NULL for queries recorded before it was, ttft_budget_ms for asks without a budget): timing figures computed from the tagged queries (milliseconds rounded to 0.001; percentiles interpolate linearly; failed queries excluded) and, from the sweep''s summary, the relevance figures of the context''s documents (hit_rate, recall, mrr: fractions 0..1, NULL without relevance labels).';

-- +goose Down
DROP VIEW sweep_results;

CREATE VIEW sweep_results AS
WITH timing AS (
    SELECT
        sweep_id,
        provider,
        model,
        retrieval,
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
    GROUP BY sweep_id, provider, model, retrieval, top_k, rerank_top_n, max_context_tokens
)
SELECT
    t.sweep_id,
    s.created_at AS sweep_created_at,
    s.status AS sweep_status,
    t.provider,
    t.model,
    t.retrieval,
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
        AS x(top_k integer, rerank_top_n integer, max_context_tokens integer, retrieval text,
             hit_rate double precision, recall double precision, mrr double precision)
    WHERE x.top_k = t.top_k AND x.rerank_top_n = t.rerank_top_n
      -- a setting without a budget ran under the server's own, whatever it was
      AND (x.max_context_tokens IS NULL OR x.max_context_tokens = t.max_context_tokens)
      -- a setting without a mode ran under the server's default, which the
      -- queries record
      AND (x.retrieval IS NULL OR x.retrieval IS NOT DISTINCT FROM t.retrieval)
    LIMIT 1
) q ON true;

COMMENT ON VIEW sweep_results IS 'Per sweep, provider, model and setting (retrieval mode, top_k, rerank_top_n, max_context_tokens; retrieval is NULL for queries recorded before it was): timing figures computed from the tagged queries (milliseconds rounded to 0.001; percentiles interpolate linearly; failed queries excluded) and, from the sweep''s summary, the relevance figures of the context''s documents (hit_rate, recall, mrr: fractions 0..1, NULL without relevance labels).';
