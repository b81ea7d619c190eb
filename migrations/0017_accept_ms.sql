-- The accept stage: from the moment the request's first byte was read to the
-- pipeline's start (parsing, routing, validation, and under load the wait for
-- a goroutine to run the handler). It is part of TTFT, which now starts at the
-- request's arrival:
-- ttft_ms = accept_ms + queue_ms + retrieval_ms + gen_ttft_ms + overhead_ms + reasoning_ms.

-- +goose Up
ALTER TABLE queries ADD COLUMN accept_ms double precision NOT NULL DEFAULT 0;

COMMENT ON COLUMN queries.accept_ms IS 'Milliseconds from the request''s first byte read to the pipeline''s start (the accept stage); 0 for queries run in-process (sweeps).';
COMMENT ON COLUMN queries.overhead_ms IS 'Milliseconds of ragtime''s own glue: first_token_ms − accept_ms − queue_ms − retrieval_ms − gen_ttft_ms; well under 1 ms when healthy. NULL when no answer token was flushed.';

-- +goose Down
ALTER TABLE queries DROP COLUMN accept_ms;
