-- A reasoning model thinks before it answers: the time from its first token
-- (of any kind) to its first answer token is kept apart, so overhead_ms
-- stays ragtime's own glue and ttft_ms still adds up:
-- ttft_ms = queue_ms + retrieval_ms + gen_ttft_ms + overhead_ms + reasoning_ms.

-- +goose Up
ALTER TABLE queries ADD COLUMN reasoning_ms double precision NULL;

COMMENT ON COLUMN queries.reasoning_ms IS 'Milliseconds from the first token of any kind to the first answer token (the model''s thinking before it answers); 0 for a model that does not reason; NULL when no answer token was flushed.';
COMMENT ON COLUMN queries.overhead_ms IS 'Milliseconds of ragtime''s own glue: first_token_ms − queue_ms − retrieval_ms − gen_ttft_ms; well under 1 ms when healthy. NULL when no answer token was flushed.';

-- +goose Down
ALTER TABLE queries DROP COLUMN reasoning_ms;
