-- The contract the stage names come from lives in the repository now
-- (docs/design.md); the column comment said DESIGN.md, a file outside it.

-- +goose Up
COMMENT ON COLUMN query_stages.name IS 'Stage name, as in docs/design.md''s measurement contract (queue, embed, search, rerank, assemble, llm_connect, llm_prefill, llm_decode).';

-- +goose Down
COMMENT ON COLUMN query_stages.name IS 'Stage name, as in DESIGN.md''s measurement contract.';
