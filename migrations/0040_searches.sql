-- Retrieval-only queries (POST /v1/search) in a table of their own, so
-- that the views over queries (TTFT, e2e, their rollups) keep describing
-- answers, and retrieval latency can be read without generation: per
-- retrieval mode, the whole retrieval and each leg of the search stage.

-- +goose Up
CREATE TABLE searches (
    id              uuid PRIMARY KEY,
    created_at      timestamptz NOT NULL,
    key_id          uuid,
    question        text,
    question_sha256 text NOT NULL,
    retrieval       text NOT NULL CHECK (retrieval IN ('hybrid', 'vector', 'lexical')),
    top_k           integer NOT NULL,
    vector_k        integer NOT NULL,
    lexical_k       integer NOT NULL,
    rerank_top_n    integer NOT NULL,
    hits            integer NOT NULL,
    status          text NOT NULL,
    error_code      text,
    retrieval_ms    double precision NOT NULL,
    embed_ms        double precision,
    search_ms       double precision,
    vector_ms       double precision,
    lexical_ms      double precision,
    fusion_ms       double precision,
    rerank_ms       double precision,
    e2e_ms          double precision NOT NULL,
    stages          jsonb NOT NULL
);
CREATE INDEX searches_created_at_idx ON searches (created_at);

COMMENT ON TABLE searches IS 'Retrieval-only queries (POST /v1/search): the stages of an ask up to rerank, without generation.';
COMMENT ON COLUMN searches.retrieval_ms IS 'embed + search + rerank, on the query''s clock.';
COMMENT ON COLUMN searches.vector_ms IS 'The vector leg''s time inside the search stage (NULL when it did not run); legs of a hybrid run at once.';
COMMENT ON COLUMN searches.lexical_ms IS 'The lexical (BM25) leg''s time inside the search stage (NULL when it did not run).';

CREATE VIEW retrieval_latency AS
SELECT date_trunc('hour', created_at) AS hour,
       retrieval,
       count(*) AS searches,
       round_ms(percentile_cont(0.5) WITHIN GROUP (ORDER BY retrieval_ms)) AS retrieval_p50_ms,
       round_ms(percentile_cont(0.95) WITHIN GROUP (ORDER BY retrieval_ms)) AS retrieval_p95_ms,
       round_ms(percentile_cont(0.5) WITHIN GROUP (ORDER BY search_ms)) AS search_p50_ms,
       round_ms(percentile_cont(0.5) WITHIN GROUP (ORDER BY vector_ms)) AS vector_p50_ms,
       round_ms(percentile_cont(0.5) WITHIN GROUP (ORDER BY lexical_ms)) AS lexical_p50_ms,
       round_ms(percentile_cont(0.5) WITHIN GROUP (ORDER BY rerank_ms)) AS rerank_p50_ms
FROM searches
WHERE status = 'ok'
GROUP BY 1, 2;

COMMENT ON VIEW retrieval_latency IS 'Retrieval latency per hour and retrieval mode, from POST /v1/search: no generation in it.';

-- +goose Down
DROP VIEW retrieval_latency;
DROP TABLE searches;
