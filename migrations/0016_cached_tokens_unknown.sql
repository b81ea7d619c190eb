-- Ollama reuses its last prompt's KV cache (its log showed 443 of 444 tokens
-- reused, prefill 1,724 → 20 ms) but reports no cached tokens, so
-- cached_tokens = 0 claimed a 0 % hit rate it never measured. NULL now means
-- "the provider did not say"; the hit rates count only the queries whose
-- provider did, and say how many did not.

-- +goose Up
ALTER TABLE queries ALTER COLUMN cached_tokens DROP NOT NULL, ALTER COLUMN cached_tokens DROP DEFAULT;

COMMENT ON COLUMN queries.cached_tokens IS 'Prompt tokens served from the provider''s prefix cache; NULL when the provider does not report them (Ollama): unknown, not 0.';

-- Stored before: Ollama's native API never said, so its 0 meant unknown.
UPDATE queries SET cached_tokens = NULL WHERE provider = 'ollama' AND cached_tokens = 0;

DROP VIEW cache_hit_rate;
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

COMMENT ON VIEW cache_hit_rate IS 'Per UTC hour and model: prompt tokens, prompt tokens served from the provider''s prefix cache, and their ratio over the queries whose provider reported cached tokens (NULL when none did, e.g. Ollama: unknown, not 0 %); unknown_queries counts the others. Filter on hour.';

-- +goose Down
DROP VIEW cache_hit_rate;
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

UPDATE queries SET cached_tokens = 0 WHERE cached_tokens IS NULL;
ALTER TABLE queries ALTER COLUMN cached_tokens SET DEFAULT 0, ALTER COLUMN cached_tokens SET NOT NULL;
COMMENT ON COLUMN queries.cached_tokens IS 'Prompt tokens served from the provider''s prefix cache.';
