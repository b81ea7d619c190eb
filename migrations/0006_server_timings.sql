-- What the model server reports about its own time, and the prompt tokens a
-- provider wrote to its prefix cache. All durations are milliseconds; NULL
-- means the server did not report the figure (most hosted APIs do not).

-- +goose Up
ALTER TABLE queries
    ADD COLUMN server_queue_ms double precision NULL,
    ADD COLUMN server_prefill_ms double precision NULL,
    ADD COLUMN server_load_ms double precision NULL,
    ADD COLUMN cache_creation_tokens integer NOT NULL DEFAULT 0;

COMMENT ON COLUMN queries.server_queue_ms IS 'Milliseconds the request waited in the model server''s queue, as the server reported it (vLLM metrics, llama.cpp timings, Groq usage.queue_time); NULL when not reported.';
COMMENT ON COLUMN queries.server_prefill_ms IS 'Milliseconds the model server spent on prefill, as it reported it (Ollama prompt_eval_duration, llama.cpp timings.prompt_ms, vLLM metrics, Groq usage.prompt_time); NULL when not reported.';
COMMENT ON COLUMN queries.server_load_ms IS 'Milliseconds the model server spent loading the model for this request (Ollama load_duration); NULL when not reported.';
COMMENT ON COLUMN queries.cache_creation_tokens IS 'Prompt tokens the provider wrote to its prefix cache for this request (Anthropic cache_creation_input_tokens).';

-- +goose Down
ALTER TABLE queries
    DROP COLUMN server_queue_ms,
    DROP COLUMN server_prefill_ms,
    DROP COLUMN server_load_ms,
    DROP COLUMN cache_creation_tokens;
