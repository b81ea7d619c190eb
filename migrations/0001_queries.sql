-- Timings of every /ask: one row per query, one row per stage.
-- All durations and offsets are milliseconds (float, microsecond resolution)
-- on the query's own monotonic clock, relative to t0 (the moment the handler
-- had a valid request).

-- +goose Up
CREATE TABLE queries (
    id                uuid PRIMARY KEY,
    created_at        timestamptz NOT NULL DEFAULT now(),
    question          text NULL,
    question_sha256   text NOT NULL,
    top_k             integer NOT NULL,
    rerank_top_n      integer NOT NULL,
    max_tokens        integer NOT NULL,
    model             text NOT NULL,
    provider          text NOT NULL,
    status            text NOT NULL CHECK (status IN ('ok', 'error', 'cancelled')),
    error_code        text NULL,
    error_message     text NULL,
    ttft_ms           double precision NULL,
    first_token_ms    double precision NULL,
    e2e_ms            double precision NOT NULL,
    queue_ms          double precision NOT NULL,
    retrieval_ms      double precision NOT NULL,
    gen_ttft_ms       double precision NOT NULL,
    llm_prefill_ms    double precision NOT NULL,
    overhead_ms       double precision NULL,
    retrieval_share   double precision NULL,
    prefill_share     double precision NULL,
    prompt_tokens     integer NOT NULL DEFAULT 0,
    completion_tokens integer NOT NULL DEFAULT 0,
    cached_tokens     integer NOT NULL DEFAULT 0,
    reasoning_tokens  integer NOT NULL DEFAULT 0,
    conn_reused       boolean NULL,
    upstream_status   integer NULL,
    request_id        text NULL
);

CREATE INDEX queries_created_at_idx ON queries (created_at);

COMMENT ON TABLE queries IS 'One row per /ask. Times are milliseconds (float, microsecond resolution) relative to t0, the moment the handler had a valid request.';
COMMENT ON COLUMN queries.id IS 'Query id, as sent in the meta and done SSE events.';
COMMENT ON COLUMN queries.created_at IS 'Wall-clock time of t0.';
COMMENT ON COLUMN queries.question IS 'The question verbatim; NULL when questions are stored as hashes only.';
COMMENT ON COLUMN queries.question_sha256 IS 'Hex SHA-256 of the question.';
COMMENT ON COLUMN queries.top_k IS 'Chunks asked of the vector search.';
COMMENT ON COLUMN queries.rerank_top_n IS 'Chunks kept after reranking.';
COMMENT ON COLUMN queries.max_tokens IS 'Answer token limit sent to the model.';
COMMENT ON COLUMN queries.model IS 'Model that generated the answer.';
COMMENT ON COLUMN queries.provider IS 'Generator backend (openai, anthropic, ollama, extractive, llmsim, ...).';
COMMENT ON COLUMN queries.status IS 'ok, error or cancelled (the client went away).';
COMMENT ON COLUMN queries.error_code IS 'Stable error code (llm_auth, store_unavailable, ...) when status is not ok.';
COMMENT ON COLUMN queries.error_message IS 'What went wrong, when status is not ok.';
COMMENT ON COLUMN queries.ttft_ms IS 'Milliseconds from t0 to the first answer token written and flushed to the client; NULL when none was.';
COMMENT ON COLUMN queries.first_token_ms IS 'Milliseconds from t0 to the first token of any kind (reasoning included) flushed; NULL when none was.';
COMMENT ON COLUMN queries.e2e_ms IS 'Milliseconds from t0 to the stream closing.';
COMMENT ON COLUMN queries.queue_ms IS 'Milliseconds waiting for admission (queue stage); 0 without a concurrency limit.';
COMMENT ON COLUMN queries.retrieval_ms IS 'Milliseconds of embed + search + rerank + assemble.';
COMMENT ON COLUMN queries.gen_ttft_ms IS 'Milliseconds of llm_connect + llm_prefill.';
COMMENT ON COLUMN queries.llm_prefill_ms IS 'Milliseconds from the LLM request written to the first token received (network RTT + server queue + prefill).';
COMMENT ON COLUMN queries.overhead_ms IS 'Milliseconds of the service''s own glue: ttft_ms - queue_ms - retrieval_ms - gen_ttft_ms; NULL without ttft_ms.';
COMMENT ON COLUMN queries.retrieval_share IS 'retrieval_ms / ttft_ms (a fraction, 0..1); NULL without ttft_ms.';
COMMENT ON COLUMN queries.prefill_share IS 'llm_prefill_ms / ttft_ms (a fraction, 0..1); NULL without ttft_ms.';
COMMENT ON COLUMN queries.prompt_tokens IS 'Prompt tokens, as the provider reported (or as counted locally).';
COMMENT ON COLUMN queries.completion_tokens IS 'Completion tokens, reasoning included.';
COMMENT ON COLUMN queries.cached_tokens IS 'Prompt tokens served from the provider''s prefix cache.';
COMMENT ON COLUMN queries.reasoning_tokens IS 'Thinking tokens the model emitted before its answer.';
COMMENT ON COLUMN queries.conn_reused IS 'Whether the LLM call reused a keep-alive connection; NULL when no call was made.';
COMMENT ON COLUMN queries.upstream_status IS 'HTTP status of the LLM response; NULL when there was none.';
COMMENT ON COLUMN queries.request_id IS 'The LLM provider''s request id, when it sent one.';

CREATE TABLE query_stages (
    query_id    uuid NOT NULL REFERENCES queries (id) ON DELETE CASCADE,
    seq         integer NOT NULL,
    name        text NOT NULL,
    start_ms    double precision NOT NULL,
    duration_ms double precision NOT NULL,
    attrs       jsonb NULL,
    PRIMARY KEY (query_id, seq)
);

COMMENT ON TABLE query_stages IS 'One row per finished stage of a query (queue, embed, search, rerank, assemble, llm_connect, llm_prefill, llm_decode).';
COMMENT ON COLUMN query_stages.query_id IS 'The query (queries.id).';
COMMENT ON COLUMN query_stages.seq IS 'Order of the stage within its query.';
COMMENT ON COLUMN query_stages.name IS 'Stage name, as in DESIGN.md''s measurement contract.';
COMMENT ON COLUMN query_stages.start_ms IS 'Milliseconds from t0 to the stage start.';
COMMENT ON COLUMN query_stages.duration_ms IS 'Milliseconds the stage took.';
COMMENT ON COLUMN query_stages.attrs IS 'Stage attributes (k, hits, reused, dns_ms, itl_p95_ms, ...); keys ending in _ms are milliseconds.';

-- +goose Down
DROP TABLE query_stages;
DROP TABLE queries;
