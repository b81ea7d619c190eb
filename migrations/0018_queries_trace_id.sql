-- The query's OpenTelemetry trace id, so a row leads to its trace in Jaeger,
-- Tempo or any OTLP backend (serve --otlp-endpoint, --trace-url-template;
-- docs/tracing.md), and why the model stopped (the trace's
-- gen_ai.response.finish_reasons). Both NULL when unknown.

-- +goose Up
ALTER TABLE queries ADD COLUMN trace_id text
    CONSTRAINT queries_trace_id_hex CHECK (trace_id ~ '^[0-9a-f]{32}$');
ALTER TABLE queries ADD COLUMN finish_reason text;

COMMENT ON COLUMN queries.trace_id IS 'OpenTelemetry trace id (32 lower-case hex digits) of the query''s trace; NULL when it was not traced or not sampled.';
COMMENT ON COLUMN queries.finish_reason IS 'Why the model stopped, in the provider''s words (stop, length, end_turn, ...); NULL when it did not say.';

-- +goose Down
ALTER TABLE queries DROP COLUMN finish_reason;
ALTER TABLE queries DROP COLUMN trace_id;
