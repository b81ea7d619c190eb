-- The figures a reader gets are rounded the one way the views round them:
-- milliseconds to 0.001 (round_ms), as numeric.
--
-- rollup_percentile, the one-percentile reader of a roll-up histogram that
-- Grafana panels and hand-written queries use, returned the interpolated
-- double (163.06924999999984); it now returns round_ms of it.
-- rollup_percentiles stays the raw building block the views round.

-- +goose Up
DROP FUNCTION rollup_percentile(bigint[], double precision);

-- +goose StatementBegin
CREATE FUNCTION rollup_percentile(hist bigint[], fraction double precision) RETURNS numeric
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT round_ms((rollup_percentiles(hist, ARRAY[fraction]))[1])
$$;
-- +goose StatementEnd

COMMENT ON FUNCTION rollup_percentile(bigint[], double precision) IS 'One percentile (fraction 0..1) of a histogram (query_rollups.hist), in milliseconds rounded to 0.001 (round_ms), as the views return them; see rollup_percentiles for the unrounded array. Grafana panels and the views share it.';

-- +goose Down
DROP FUNCTION rollup_percentile(bigint[], double precision);

-- +goose StatementBegin
CREATE FUNCTION rollup_percentile(hist bigint[], fraction double precision) RETURNS double precision
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT (rollup_percentiles(hist, ARRAY[fraction]))[1]
$$;
-- +goose StatementEnd

COMMENT ON FUNCTION rollup_percentile(bigint[], double precision) IS 'One percentile (fraction 0..1) of a histogram (query_rollups.hist), in milliseconds; see rollup_percentiles. Grafana panels and the views share it.';
