-- llm_prefill_ms (request written → first token, as the client sees it)
-- minus the server's own prefill (server_prefill_ms) is not the network: on
-- loopback it grows with the prompt (tokenizing and templating outside the
-- server's prompt timer), holds Ollama's model load and first step, and
-- under contention is mostly the server's queue. It is stored as its own
-- figure whenever the server reports its prefill.

-- +goose Up
ALTER TABLE queries ADD COLUMN prefill_unexplained_ms double precision NULL;

COMMENT ON COLUMN queries.prefill_unexplained_ms IS 'Milliseconds of llm_prefill_ms before the server''s own prefill: llm_prefill_ms − server_prefill_ms (the server''s queue, tokenizing and templating the prompt, the network; negative if the server''s figure spans more than the client saw). NULL when the server reports no prefill.';

UPDATE queries SET prefill_unexplained_ms = round((llm_prefill_ms - server_prefill_ms)::numeric, 3)::double precision
WHERE server_prefill_ms IS NOT NULL;

-- +goose Down
ALTER TABLE queries DROP COLUMN prefill_unexplained_ms;
