-- The accept stage (0017) runs before queue, and t0 is the request's
-- arrival, its first byte at the server's socket, no longer the moment the
-- handler had a valid request: the comments that name the stages and t0
-- say so (docs/design.md's measurement contract).

-- +goose Up
COMMENT ON TABLE queries IS 'One row per /ask. Times are milliseconds (float, microsecond resolution) relative to t0, the request''s arrival (its first byte at the server''s socket; the pipeline''s start for queries run in-process).';
COMMENT ON COLUMN query_stages.name IS 'Stage name, as in docs/design.md''s measurement contract (accept, queue, embed, search, rerank, assemble, llm_connect, llm_prefill, llm_decode).';

-- +goose Down
COMMENT ON TABLE queries IS 'One row per /ask. Times are milliseconds (float, microsecond resolution) relative to t0, the moment the handler had a valid request.';
COMMENT ON COLUMN query_stages.name IS 'Stage name, as in docs/design.md''s measurement contract (queue, embed, search, rerank, assemble, llm_connect, llm_prefill, llm_decode).';
