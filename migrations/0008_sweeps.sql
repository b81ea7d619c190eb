-- Sweeps: `ragtime sweep` runs questions at several settings (top_k,
-- rerank_top_n, context budget) and tags every query it makes with its id.

-- +goose Up
CREATE TABLE sweeps (
    id          uuid PRIMARY KEY,
    created_at  timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz NULL,
    status      text NOT NULL CHECK (status IN ('running', 'done', 'interrupted', 'failed')),
    mode        text NOT NULL CHECK (mode IN ('in-process', 'server')),
    seed        bigint NOT NULL,
    params      jsonb NOT NULL,
    summary     jsonb NULL
);

COMMENT ON TABLE sweeps IS 'One row per `ragtime sweep`: its parameters and, once it stopped, its per-setting summary and recommendation.';
COMMENT ON COLUMN sweeps.id IS 'Sweep id; queries.sweep_id points here.';
COMMENT ON COLUMN sweeps.created_at IS 'When the sweep started.';
COMMENT ON COLUMN sweeps.finished_at IS 'When the sweep stopped (done, interrupted or failed); NULL while it runs.';
COMMENT ON COLUMN sweeps.status IS 'running, done, interrupted (Ctrl-C: the summary holds what was measured) or failed.';
COMMENT ON COLUMN sweeps.mode IS 'in-process (the sweep ran the pipeline itself) or server (it called a running ragtime''s /ask).';
COMMENT ON COLUMN sweeps.seed IS 'Seed of the shuffle of (question, setting, run) across the sweep.';
COMMENT ON COLUMN sweeps.params IS 'The sweep''s parameters: questions file, settings, runs, concurrency, tolerance, budget, server.';
COMMENT ON COLUMN sweeps.summary IS 'Per-setting figures as the sweep computed them (settings[]: top_k, rerank_top_n, max_context_tokens, hit_rate, recall, mrr, ...) and the recommendation.';

ALTER TABLE queries ADD COLUMN sweep_id uuid NULL REFERENCES sweeps (id) ON DELETE SET NULL;
ALTER TABLE queries ADD COLUMN max_context_tokens integer NULL;
CREATE INDEX queries_sweep_id_idx ON queries (sweep_id) WHERE sweep_id IS NOT NULL;

COMMENT ON COLUMN queries.sweep_id IS 'The sweep that made this query (sweeps.id); NULL for ordinary /ask traffic and for a sweep''s uncounted warm-up.';
COMMENT ON COLUMN queries.max_context_tokens IS 'Token budget for retrieved context the query was assembled under; NULL when not recorded.';

-- +goose Down
DROP INDEX queries_sweep_id_idx;
ALTER TABLE queries DROP COLUMN max_context_tokens;
ALTER TABLE queries DROP COLUMN sweep_id;
DROP TABLE sweeps;
