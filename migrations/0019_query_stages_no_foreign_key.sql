-- query_stages loses its foreign key to queries. The recorder is the only
-- writer of both tables and writes a query's stages in the transaction that
-- inserts the query, only for the queries that insert returned, so the key
-- checked nothing the writer had not already made true; yet it cost a lookup
-- of queries' primary key per stage row, nearly half of the recorder's time
-- (8 stage rows per query). Deleting a query now deletes its stages
-- explicitly (prune), instead of ON DELETE CASCADE.

-- +goose Up
ALTER TABLE query_stages DROP CONSTRAINT IF EXISTS query_stages_query_id_fkey;

-- +goose Down
DELETE FROM query_stages s WHERE NOT EXISTS (SELECT 1 FROM queries q WHERE q.id = s.query_id);
ALTER TABLE query_stages ADD CONSTRAINT query_stages_query_id_fkey
    FOREIGN KEY (query_id) REFERENCES queries (id) ON DELETE CASCADE;
