-- The figures a reader gets are rounded the one way the views round them:
-- milliseconds to 0.001 (round_ms), as numeric.
--
-- rollup_percentile, the one-percentile reader of a roll-up histogram that
-- Grafana panels and hand-written queries use, returned the interpolated
-- double (163.06924999999984); it now returns round_ms of it.
-- rollup_percentiles stays the raw building block the views round.
--
-- ttft_breakdown gains accept_ms and reasoning_ms, the two parts of the TTFT
-- identity it lacked, so that its parts add up to ttft_ms on their own:
-- ttft_ms = accept_ms + queue_ms + retrieval_ms + gen_ttft_ms + overhead_ms
-- + reasoning_ms.

-- +goose Up
DROP FUNCTION rollup_percentile(bigint[], double precision);

-- +goose StatementBegin
CREATE FUNCTION rollup_percentile(hist bigint[], fraction double precision) RETURNS numeric
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT round_ms((rollup_percentiles(hist, ARRAY[fraction]))[1])
$$;
-- +goose StatementEnd

COMMENT ON FUNCTION rollup_percentile(bigint[], double precision) IS 'One percentile (fraction 0..1) of a histogram (query_rollups.hist), in milliseconds rounded to 0.001 (round_ms), as the views return them; see rollup_percentiles for the unrounded array. Grafana panels and the views share it.';

CREATE OR REPLACE VIEW ttft_breakdown AS
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
    cached_tokens,
    round_ms(accept_ms) AS accept_ms,
    round_ms(reasoning_ms) AS reasoning_ms
FROM queries;

COMMENT ON VIEW ttft_breakdown IS 'Where each query''s TTFT went: ttft_ms = accept_ms + queue_ms + retrieval_ms + gen_ttft_ms + overhead_ms + reasoning_ms, in milliseconds rounded to 0.001; shares are fractions of ttft_ms.';

-- +goose Down
DROP VIEW ttft_breakdown;

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

DROP FUNCTION rollup_percentile(bigint[], double precision);

-- +goose StatementBegin
CREATE FUNCTION rollup_percentile(hist bigint[], fraction double precision) RETURNS double precision
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT (rollup_percentiles(hist, ARRAY[fraction]))[1]
$$;
-- +goose StatementEnd

COMMENT ON FUNCTION rollup_percentile(bigint[], double precision) IS 'One percentile (fraction 0..1) of a histogram (query_rollups.hist), in milliseconds; see rollup_percentiles. Grafana panels and the views share it.';
