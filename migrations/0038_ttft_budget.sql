-- The TTFT budget (issue 33). An ask with a budget keeps the longest prefix
-- of its ranked chunks whose predicted TTFT fits it; the record keeps the
-- budget, the prediction, the chunks dropped for it and the outcome.
-- prefill_model is the live prefill model each replica reads; budget_outcomes
-- how often budgets held and how far the predictions were off.

-- +goose Up
ALTER TABLE queries
    ADD COLUMN ttft_budget_ms double precision,
    ADD COLUMN predicted_ttft_ms double precision,
    ADD COLUMN predicted_prefill_ms double precision,
    ADD COLUMN budget_dropped integer,
    ADD COLUMN budget_outcome text;

COMMENT ON COLUMN queries.ttft_budget_ms IS 'The ask''s TTFT budget in milliseconds (ttft_budget_ms, the key''s or serve''s default); NULL: none.';
COMMENT ON COLUMN queries.predicted_ttft_ms IS 'The TTFT predicted when the context was chosen: the time spent until then + predicted connect + predicted prefill (prefill_model, at serve''s --ttft-budget-quantile); NULL without a budget or a model.';
COMMENT ON COLUMN queries.predicted_prefill_ms IS 'The llm_prefill_ms predicted for the prompt sent (the part of predicted_ttft_ms after the connection); NULL without a budget or a model.';
COMMENT ON COLUMN queries.budget_dropped IS 'Ranked chunks left out of the context to fit the TTFT budget; NULL without a budget.';
COMMENT ON COLUMN queries.budget_outcome IS 'held (ttft_ms within the budget), missed (over it, or no answer token), unmodelled (no prefill model for the provider and model yet: nothing dropped); NULL without a budget.';

-- prefill_model: per provider and model, the last 256 successful queries of
-- the past hour (a sliding window that follows the server's load), their
-- llm_prefill_ms against their uncached prompt tokens (prompt_tokens −
-- cached_tokens). Robust to outliers: the window is cut into 8 equal-count
-- bins by tokens, each bin reduced to its medians, and the line fitted
-- through the 8 medians (a negative slope is taken as flat at the median).
-- The spread is the quantiles of measured / fitted over the window, and
-- recent_ratio_p50 the median of the 16 latest: a prediction at quantile q
-- is the line times ratio_q, moved by recent_ratio_p50 / ratio_p50 when the
-- server has just slowed down or sped up (the line follows within half a
-- window; the 16 latest within 8 queries). connect_*_ms are
-- gen_ttft_ms − llm_prefill_ms (llm_connect); server_* and pre_* are the
-- same fit of server_prefill_ms and of the time before it
-- (prefill_unexplained_ms − server_queue_ms), where the server reports them.
CREATE VIEW prefill_model AS
WITH recent AS (
    SELECT provider, model, created_at,
           greatest(prompt_tokens - coalesce(cached_tokens, 0), 0)::double precision AS x,
           llm_prefill_ms AS y,
           greatest(gen_ttft_ms - llm_prefill_ms, 0) AS connect_ms,
           server_prefill_ms AS sp,
           prefill_unexplained_ms - coalesce(server_queue_ms, 0) AS pre,
           server_queue_ms, cached_tokens,
           row_number() OVER (PARTITION BY provider, model ORDER BY created_at DESC) AS age
    FROM queries
    WHERE created_at > now() - interval '1 hour' AND status = 'ok' AND prompt_tokens > 0 AND llm_prefill_ms > 0
), win AS (
    SELECT *, ntile(8) OVER (PARTITION BY provider, model ORDER BY x) AS bin FROM recent WHERE age <= 256
), med AS (
    SELECT provider, model, bin,
           percentile_cont(0.5) WITHIN GROUP (ORDER BY x) AS x,
           percentile_cont(0.5) WITHIN GROUP (ORDER BY y) AS y,
           percentile_cont(0.5) WITHIN GROUP (ORDER BY sp) AS sp,
           percentile_cont(0.5) WITHIN GROUP (ORDER BY pre) AS pre
    FROM win GROUP BY provider, model, bin
), fit AS (
    SELECT provider, model,
           regr_slope(y, x) AS slope, regr_intercept(y, x) AS icpt,
           percentile_cont(0.5) WITHIN GROUP (ORDER BY y) AS ymed,
           regr_slope(sp, x) AS sp_slope, regr_intercept(sp, x) AS sp_icpt,
           regr_slope(pre, x) AS pre_slope, regr_intercept(pre, x) AS pre_icpt
    FROM med GROUP BY provider, model
), line AS (
    SELECT provider, model,
           CASE WHEN slope IS NULL OR slope < 0 THEN ymed ELSE icpt END AS intercept_ms,
           CASE WHEN slope IS NULL OR slope < 0 THEN 0 ELSE slope END AS ms_per_token,
           sp_icpt, sp_slope, pre_icpt, pre_slope
    FROM fit
), spread AS (
    SELECT w.provider, w.model,
           percentile_cont(ARRAY[0.5, 0.9, 0.95]) WITHIN GROUP (
               ORDER BY w.y / greatest(l.intercept_ms + l.ms_per_token * w.x, 0.001)) AS ratio,
           percentile_cont(0.5) WITHIN GROUP (
               ORDER BY w.y / greatest(l.intercept_ms + l.ms_per_token * w.x, 0.001)) FILTER (WHERE w.age <= 16) AS recent
    FROM win w JOIN line l USING (provider, model) GROUP BY w.provider, w.model
), totals AS (
    SELECT provider, model, count(*) AS samples, min(created_at) AS since, max(created_at) AS until,
           min(x)::integer AS min_tokens, max(x)::integer AS max_tokens,
           percentile_cont(ARRAY[0.5, 0.9, 0.95]) WITHIN GROUP (ORDER BY connect_ms) AS connect,
           coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY cached_tokens), 0) AS cached_tokens_p50,
           percentile_cont(0.5) WITHIN GROUP (ORDER BY server_queue_ms) AS server_queue_p50_ms
    FROM win GROUP BY provider, model
)
SELECT t.provider, t.model, t.samples, t.since, t.until, t.min_tokens, t.max_tokens,
       round(l.intercept_ms::numeric, 3) AS intercept_ms, l.ms_per_token,
       s.ratio[1] AS ratio_p50, s.ratio[2] AS ratio_p90, s.ratio[3] AS ratio_p95, s.recent AS recent_ratio_p50,
       round(t.connect[1]::numeric, 3) AS connect_p50_ms, round(t.connect[2]::numeric, 3) AS connect_p90_ms,
       round(t.connect[3]::numeric, 3) AS connect_p95_ms,
       t.cached_tokens_p50, round(t.server_queue_p50_ms::numeric, 3) AS server_queue_p50_ms,
       round(l.sp_icpt::numeric, 3) AS server_intercept_ms, l.sp_slope AS server_ms_per_token,
       round(l.pre_icpt::numeric, 3) AS pre_intercept_ms, l.pre_slope AS pre_ms_per_token
FROM totals t JOIN line l USING (provider, model) JOIN spread s USING (provider, model);

COMMENT ON VIEW prefill_model IS 'The live prefill model per provider and model: llm_prefill_ms ≈ (intercept_ms + ms_per_token × uncached prompt tokens) × ratio_q, fitted through the bin medians of the last 256 ok queries of the past hour (docs/ttft.md).';

-- budget_outcomes: per hour, provider and model, the asks with a budget:
-- how often it held, what was dropped for it, and how far the predictions
-- were from the measurements (TTFT, and prefill).
CREATE VIEW budget_outcomes AS
SELECT date_trunc('hour', created_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' AS hour, provider, model,
       count(*) AS queries,
       count(*) FILTER (WHERE budget_outcome = 'held') AS held,
       count(*) FILTER (WHERE budget_outcome = 'missed') AS missed,
       count(*) FILTER (WHERE budget_outcome = 'unmodelled') AS unmodelled,
       round(avg(budget_dropped)::numeric, 2)::double precision AS dropped_avg,
       round((percentile_cont(0.5) WITHIN GROUP (ORDER BY ttft_ms))::numeric, 3) AS ttft_p50_ms,
       round((percentile_cont(0.95) WITHIN GROUP (ORDER BY ttft_ms))::numeric, 3) AS ttft_p95_ms,
       round((percentile_cont(0.5) WITHIN GROUP (ORDER BY abs(ttft_ms - predicted_ttft_ms)))::numeric, 3) AS ttft_abs_error_p50_ms,
       percentile_cont(0.5) WITHIN GROUP (ORDER BY abs(llm_prefill_ms - predicted_prefill_ms) / nullif(llm_prefill_ms, 0)) AS prefill_rel_error_p50
FROM queries
WHERE ttft_budget_ms IS NOT NULL
GROUP BY 1, 2, 3;

COMMENT ON VIEW budget_outcomes IS 'Asks with a TTFT budget per hour, provider and model: held / missed / unmodelled, chunks dropped, and the median error of predicted_ttft_ms and predicted_prefill_ms (docs/ttft.md).';

-- +goose Down
DROP VIEW budget_outcomes;
DROP VIEW prefill_model;
ALTER TABLE queries
    DROP COLUMN ttft_budget_ms,
    DROP COLUMN predicted_ttft_ms,
    DROP COLUMN predicted_prefill_ms,
    DROP COLUMN budget_dropped,
    DROP COLUMN budget_outcome;
