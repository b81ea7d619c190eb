-- Each query remembers the API key it was asked with, so that a key reads
-- its own queries (GET /v1/queries, /v1/queries/:id, /v1/stats) and an admin
-- key reads them all. No foreign key: keys are never deleted (only revoked),
-- and the recorder's batched inserts stay free of a lookup per row.

-- +goose Up
ALTER TABLE queries ADD COLUMN key_id uuid NULL;
CREATE INDEX queries_key_id_created_at_idx ON queries (key_id, created_at DESC, id DESC) WHERE key_id IS NOT NULL;

COMMENT ON COLUMN queries.key_id IS 'The API key the query was asked with (api_keys.id); NULL when the server ran without keys, or for in-process callers (sweep).';

-- +goose Down
DROP INDEX queries_key_id_created_at_idx;
ALTER TABLE queries DROP COLUMN key_id;
