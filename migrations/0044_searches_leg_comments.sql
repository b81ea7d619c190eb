-- The leg columns of searches say when they are NULL: a leg that did not
-- run, or one that ran inside a store that times its legs together (Qdrant's
-- lexical leg: one QueryBatch, docs/index.md).

-- +goose Up
COMMENT ON COLUMN searches.vector_ms IS 'The vector leg''s time inside the search stage; legs of a hybrid run at once. NULL when it did not run, or ran inside a store that does not time its legs apart (Qdrant''s hybrid: one request).';
COMMENT ON COLUMN searches.lexical_ms IS 'The lexical (BM25) leg''s time inside the search stage. NULL when it did not run, or ran inside a store that does not time its legs apart (Qdrant''s sparse vectors).';
COMMENT ON COLUMN searches.fusion_ms IS 'The time to fuse a hybrid''s legs. NULL when nothing was fused, or when the store fused them (Qdrant''s RRF; the stage attr fused_by says store).';

-- +goose Down
COMMENT ON COLUMN searches.vector_ms IS 'The vector leg''s time inside the search stage (NULL when it did not run); legs of a hybrid run at once.';
COMMENT ON COLUMN searches.lexical_ms IS 'The lexical (BM25) leg''s time inside the search stage (NULL when it did not run).';
COMMENT ON COLUMN searches.fusion_ms IS NULL;
