-- +goose Up
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

COMMENT ON VIEW ttft_breakdown IS 'Where each query''s TTFT went: ttft_ms = queue_ms + retrieval_ms + gen_ttft_ms + overhead_ms, all in milliseconds; shares are fractions of ttft_ms.';

-- +goose Down
DROP VIEW ttft_breakdown;
