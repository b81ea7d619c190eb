-- query_stages kept two indexes, so every stage row the recorder wrote cost
-- two index entries (16 per query of 8 stages): the primary key (query_id,
-- created_at, seq) for one query's stages, and (created_at) INCLUDE (name,
-- duration_ms) for stage_percentiles' window. A perf profile of PostgreSQL
-- under the recorder put 45 % of its time in index inserts. One index now
-- serves both: the primary key becomes (created_at, query_id, seq) INCLUDE
-- (name, duration_ms).
--
-- * Every read of one query's stages names its created_at (GetQuery, the
--   list's stage summary, and now slow_queries, below): an equality on
--   created_at and query_id, one probe as before.
-- * A window (stage_percentiles over the last hour, rollup_fill, prune) is
--   a range of the key's first column, and query_id, name and duration_ms
--   are in the index, so it stays an index-only scan joined to the window's
--   queries.
-- * The key holds the same columns, so it is as unique as before; and it
--   grows at its right edge whatever the ids' version (a v4 id first made
--   every insert land on a random leaf).
--
-- slow_queries found a query's dominant stage by query_id alone, which
-- probed every day partition's key; it now names the query's created_at
-- too (a stage's created_at is its query's), one partition.
--
-- On an existing database this rebuilds the key of every stage partition,
-- holding the table's lock while it does (minutes at tens of millions of
-- stages): plan it as the partitioning migration (0030).

-- +goose Up
ALTER TABLE query_stages DROP CONSTRAINT query_stages_pkey;
ALTER TABLE query_stages ADD CONSTRAINT query_stages_pkey PRIMARY KEY (created_at, query_id, seq) INCLUDE (name, duration_ms);
DROP INDEX query_stages_created_at_idx;

CREATE OR REPLACE VIEW slow_queries AS
SELECT q.id AS query_id,
       q.created_at,
       q.provider,
       q.model,
       q.status,
       q.error_code,
       q.top_k,
       round_ms(q.ttft_ms) AS ttft_ms,
       round_ms(q.e2e_ms) AS e2e_ms,
       round_ms(q.retrieval_ms) AS retrieval_ms,
       round_ms(q.llm_prefill_ms) AS llm_prefill_ms,
       round_share(q.retrieval_share) AS retrieval_share,
       round_share(q.prefill_share) AS prefill_share,
       (SELECT s.name FROM query_stages s
        WHERE s.created_at = q.created_at AND s.query_id = q.id AND s.name <> 'llm_decode'
        ORDER BY s.duration_ms DESC, s.seq LIMIT 1) AS dominant_stage,
       (SELECT round_ms(s.duration_ms) FROM query_stages s
        WHERE s.created_at = q.created_at AND s.query_id = q.id AND s.name <> 'llm_decode'
        ORDER BY s.duration_ms DESC, s.seq LIMIT 1) AS dominant_ms,
       left(q.question, 200) AS question
FROM queries q;

-- +goose Down
CREATE OR REPLACE VIEW slow_queries AS
SELECT q.id AS query_id,
       q.created_at,
       q.provider,
       q.model,
       q.status,
       q.error_code,
       q.top_k,
       round_ms(q.ttft_ms) AS ttft_ms,
       round_ms(q.e2e_ms) AS e2e_ms,
       round_ms(q.retrieval_ms) AS retrieval_ms,
       round_ms(q.llm_prefill_ms) AS llm_prefill_ms,
       round_share(q.retrieval_share) AS retrieval_share,
       round_share(q.prefill_share) AS prefill_share,
       (SELECT s.name FROM query_stages s WHERE s.query_id = q.id AND s.name <> 'llm_decode'
        ORDER BY s.duration_ms DESC, s.seq LIMIT 1) AS dominant_stage,
       (SELECT round_ms(s.duration_ms) FROM query_stages s WHERE s.query_id = q.id AND s.name <> 'llm_decode'
        ORDER BY s.duration_ms DESC, s.seq LIMIT 1) AS dominant_ms,
       left(q.question, 200) AS question
FROM queries q;

CREATE INDEX query_stages_created_at_idx ON query_stages (created_at) INCLUDE (name, duration_ms);
ALTER TABLE query_stages DROP CONSTRAINT query_stages_pkey;
ALTER TABLE query_stages ADD CONSTRAINT query_stages_pkey PRIMARY KEY (query_id, created_at, seq);
