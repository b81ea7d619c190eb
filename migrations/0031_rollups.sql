-- Roll-ups: per minute and per hour × provider × model × stage, the count,
-- sum and maximum of the durations and a fixed log-bucket histogram, kept up
-- to date by the recorder (one upsert per batch, aggregated in Go), so that
-- a window longer than an hour is read from a few hundred rows instead of
-- millions. docs/recording.md ("Roll-ups") argues the bucket width.
--
-- A histogram is a bigint[] whose subscripts are bucket numbers: bucket i
-- (i >= 0) counts the durations in [0.001 ms × 1.02^i, 0.001 ms × 1.02^(i+1));
-- bucket -1 counts those under 0.001 ms (0 included). The array spans the
-- lowest to the highest bucket used, so '[350:352]={4,0,1}' is four
-- durations of about 1.0 ms and one of about 1.04 ms. Reading bucket i as
-- 0.001 × 1.02^i × 2·1.02/2.02 (the value whose relative distance to both
-- ends is equal) is off by at most 0.02/2.02 = 0.99 % of any duration in it.
--
-- Besides the pipeline's stages, pseudo-stages summarise queries: 'ttft'
-- (ttft_ms of the queries that had a first answer token), 'e2e' (e2e_ms of
-- every query, so its n counts queries), and 'e2e_error' and
-- 'e2e_cancelled' (e2e_ms of the queries with that status).

-- +goose Up
CREATE TABLE query_rollups (
    span     text NOT NULL CHECK (span IN ('minute', 'hour')),
    start    timestamptz NOT NULL,
    provider text NOT NULL,
    model    text NOT NULL,
    stage    text NOT NULL,
    n        bigint NOT NULL,
    sum_ms   double precision NOT NULL,
    max_ms   double precision NOT NULL,
    hist     bigint[] NOT NULL,
    PRIMARY KEY (span, start, provider, model, stage)
);

COMMENT ON TABLE query_rollups IS 'Per minute and per hour (span), provider, model and stage: how many durations, their sum and maximum in milliseconds and their log-bucket histogram; written by the recorder with every batch. Read percentiles with rollup_percentile.';
COMMENT ON COLUMN query_rollups.span IS 'minute or hour: the length of the period starting at start.';
COMMENT ON COLUMN query_rollups.start IS 'Start of the UTC minute or hour the queries were created in (their created_at).';
COMMENT ON COLUMN query_rollups.provider IS 'The queries'' provider.';
COMMENT ON COLUMN query_rollups.model IS 'The queries'' model.';
COMMENT ON COLUMN query_rollups.stage IS 'A stage name (queue, embed, ..., llm_decode), or ttft (ttft_ms of answered queries), e2e (e2e_ms of every query: n counts queries) e2e_error and e2e_cancelled (e2e_ms of the queries with that status).';
COMMENT ON COLUMN query_rollups.n IS 'How many durations.';
COMMENT ON COLUMN query_rollups.sum_ms IS 'Their sum, milliseconds (sum_ms / n is the mean).';
COMMENT ON COLUMN query_rollups.max_ms IS 'The largest, milliseconds.';
COMMENT ON COLUMN query_rollups.hist IS 'Counts per bucket; the subscript is the bucket: i counts durations in [0.001 × 1.02^i, 0.001 × 1.02^(i+1)) ms, -1 those under 0.001 ms.';

-- +goose StatementBegin
CREATE FUNCTION rollup_bucket(ms double precision) RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN ms IS NULL THEN NULL WHEN ms < 0.001 THEN -1
                ELSE floor(ln(ms / 0.001) / ln(1.02))::integer END
$$;
-- +goose StatementEnd

COMMENT ON FUNCTION rollup_bucket(double precision) IS 'The histogram bucket of a duration in milliseconds (query_rollups.hist): floor(log_1.02(ms / 0.001)), -1 under 0.001 ms. The recorder computes the same in Go.';

-- +goose StatementBegin
CREATE FUNCTION rollup_bucket_ms(bucket integer) RETURNS double precision
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN bucket < 0 THEN 0 ELSE 0.001 * power(1.02, bucket) * (2 * 1.02 / 2.02) END
$$;
-- +goose StatementEnd

COMMENT ON FUNCTION rollup_bucket_ms(integer) IS 'The duration a histogram bucket stands for, in milliseconds: within 0.99 % of every duration in it (0 for bucket -1).';

-- +goose StatementBegin
CREATE FUNCTION rollup_hist_add(a bigint[], b bigint[]) RETURNS bigint[]
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
    r bigint[];
    i integer;
BEGIN
    IF a IS NULL THEN RETURN b; END IF;
    IF b IS NULL THEN RETURN a; END IF;
    r := array_fill(0::bigint, ARRAY[greatest(array_upper(a, 1), array_upper(b, 1)) - least(array_lower(a, 1), array_lower(b, 1)) + 1],
                    ARRAY[least(array_lower(a, 1), array_lower(b, 1))]);
    FOR i IN array_lower(a, 1) .. array_upper(a, 1) LOOP
        r[i] := r[i] + a[i];
    END LOOP;
    FOR i IN array_lower(b, 1) .. array_upper(b, 1) LOOP
        r[i] := r[i] + b[i];
    END LOOP;
    RETURN r;
END
$$;
-- +goose StatementEnd

COMMENT ON FUNCTION rollup_hist_add(bigint[], bigint[]) IS 'The sum of two histograms (query_rollups.hist), bucket by bucket.';

CREATE AGGREGATE rollup_hist_sum(bigint[]) (SFUNC = rollup_hist_add, STYPE = bigint[]);

COMMENT ON AGGREGATE rollup_hist_sum(bigint[]) IS 'The sum of histograms (query_rollups.hist) over rows: the histogram of a longer period, or of several models.';

-- +goose StatementBegin
CREATE FUNCTION rollup_percentiles(hist bigint[], fractions double precision[]) RETURNS double precision[]
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
    total bigint := 0;
    i integer;
    k integer;
    out double precision[] := '{}';
    want double precision;
    lo bigint;
    hi bigint;
    seen bigint;
    lo_ms double precision;
    hi_ms double precision;
BEGIN
    IF hist IS NULL THEN
        RETURN array_fill(NULL::double precision, ARRAY[cardinality(fractions)]);
    END IF;
    FOR i IN array_lower(hist, 1) .. array_upper(hist, 1) LOOP
        total := total + hist[i];
    END LOOP;
    IF total = 0 THEN
        RETURN array_fill(NULL::double precision, ARRAY[cardinality(fractions)]);
    END IF;
    FOR k IN 1 .. cardinality(fractions) LOOP
        -- As percentile_cont: the 0-based rank f·(n−1), interpolated
        -- between the values at floor and ceil of it, each read from its
        -- bucket.
        want := fractions[k] * (total - 1);
        lo := floor(want);
        hi := ceil(want);
        seen := 0;
        lo_ms := NULL;
        hi_ms := NULL;
        FOR i IN array_lower(hist, 1) .. array_upper(hist, 1) LOOP
            seen := seen + hist[i];
            IF lo_ms IS NULL AND seen > lo THEN
                lo_ms := rollup_bucket_ms(i);
            END IF;
            IF seen > hi THEN
                hi_ms := rollup_bucket_ms(i);
                EXIT;
            END IF;
        END LOOP;
        out := out || (lo_ms + (want - lo) * (hi_ms - lo_ms));
    END LOOP;
    RETURN out;
END
$$;
-- +goose StatementEnd

COMMENT ON FUNCTION rollup_percentiles(bigint[], double precision[]) IS 'Percentiles (fractions 0..1) of the durations a histogram (query_rollups.hist) counts, in milliseconds, interpolated as percentile_cont does; each within 1 % of the exact percentile (0.99 %: the bucket width). NULLs for an empty histogram.';

-- +goose StatementBegin
CREATE FUNCTION rollup_percentile(hist bigint[], fraction double precision) RETURNS double precision
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT (rollup_percentiles(hist, ARRAY[fraction]))[1]
$$;
-- +goose StatementEnd

COMMENT ON FUNCTION rollup_percentile(bigint[], double precision) IS 'One percentile (fraction 0..1) of a histogram (query_rollups.hist), in milliseconds; see rollup_percentiles. Grafana panels and the views share it.';

-- +goose StatementBegin
CREATE FUNCTION rollup_hist_of(buckets integer[], counts bigint[]) RETURNS bigint[]
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
    r bigint[];
    k integer;
    lo integer := (SELECT min(b) FROM unnest(buckets) b);
    hi integer := (SELECT max(b) FROM unnest(buckets) b);
BEGIN
    IF lo IS NULL THEN RETURN NULL; END IF;
    r := array_fill(0::bigint, ARRAY[hi - lo + 1], ARRAY[lo]);
    FOR k IN 1 .. cardinality(buckets) LOOP
        r[buckets[k]] := r[buckets[k]] + counts[k];
    END LOOP;
    RETURN r;
END
$$;
-- +goose StatementEnd

COMMENT ON FUNCTION rollup_hist_of(integer[], bigint[]) IS 'A histogram (query_rollups.hist) from parallel arrays of bucket numbers and their counts; for filling roll-ups from stored queries in SQL.';

-- +goose StatementBegin
CREATE FUNCTION rollup_fill(since timestamptz, until timestamptz) RETURNS bigint
LANGUAGE sql AS $$
    WITH durations AS (
        SELECT q.created_at, q.provider, q.model, s.name AS stage, s.duration_ms AS ms
        FROM query_stages s JOIN queries q ON q.id = s.query_id AND q.created_at = s.created_at
        WHERE s.created_at >= since AND s.created_at < until AND q.created_at >= since AND q.created_at < until
        UNION ALL
        SELECT created_at, provider, model, 'ttft', ttft_ms FROM queries
        WHERE created_at >= since AND created_at < until AND ttft_ms IS NOT NULL
        UNION ALL
        SELECT created_at, provider, model, 'e2e', e2e_ms FROM queries
        WHERE created_at >= since AND created_at < until
        UNION ALL
        SELECT created_at, provider, model, 'e2e_' || status, e2e_ms FROM queries
        WHERE created_at >= since AND created_at < until AND status <> 'ok'
    ),
    buckets AS (
        SELECT date_trunc('minute', created_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' AS start, provider, model, stage,
               rollup_bucket(ms) AS bucket, count(*) AS n, sum(ms) AS sum_ms, max(ms) AS max_ms
        FROM durations GROUP BY 1, 2, 3, 4, 5
    ),
    hour_buckets AS (
        SELECT date_trunc('hour', start AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' AS start, provider, model, stage, bucket,
               sum(n) AS n, sum(sum_ms) AS sum_ms, max(max_ms) AS max_ms
        FROM buckets GROUP BY 1, 2, 3, 4, 5
    ),
    minutes AS (
        SELECT start, provider, model, stage, sum(n)::bigint AS n, sum(sum_ms) AS sum_ms, max(max_ms) AS max_ms,
               rollup_hist_of(array_agg(bucket), array_agg(n::bigint)) AS hist
        FROM buckets GROUP BY 1, 2, 3, 4
    ),
    hours AS (
        SELECT start, provider, model, stage, sum(n)::bigint AS n, sum(sum_ms) AS sum_ms, max(max_ms) AS max_ms,
               rollup_hist_of(array_agg(bucket), array_agg(n::bigint)) AS hist
        FROM hour_buckets GROUP BY 1, 2, 3, 4
    ),
    ins AS (
        INSERT INTO query_rollups (span, start, provider, model, stage, n, sum_ms, max_ms, hist)
        SELECT 'minute', * FROM minutes
        UNION ALL
        SELECT 'hour', * FROM hours
        ON CONFLICT (span, start, provider, model, stage) DO UPDATE
        SET n = query_rollups.n + excluded.n, sum_ms = query_rollups.sum_ms + excluded.sum_ms,
            max_ms = greatest(query_rollups.max_ms, excluded.max_ms),
            hist = rollup_hist_add(query_rollups.hist, excluded.hist)
        RETURNING 1
    )
    SELECT count(*) FROM ins
$$;
-- +goose StatementEnd

COMMENT ON FUNCTION rollup_fill(timestamptz, timestamptz) IS 'Adds the stored queries created in [since, until) to query_rollups, as the recorder would have; returns the roll-up rows written. For queries stored before roll-ups existed (this migration calls it for all of them) or loaded by hand; calling it twice for the same queries counts them twice.';

-- Every query stored so far (hour-aligned bounds keep the hour rows whole).
SELECT rollup_fill('-infinity', 'infinity');

-- +goose Down
DROP FUNCTION rollup_fill(timestamptz, timestamptz);
DROP FUNCTION rollup_hist_of(integer[], bigint[]);
DROP FUNCTION rollup_percentile(bigint[], double precision);
DROP FUNCTION rollup_percentiles(bigint[], double precision[]);
DROP AGGREGATE rollup_hist_sum(bigint[]);
DROP FUNCTION rollup_hist_add(bigint[], bigint[]);
DROP FUNCTION rollup_bucket_ms(integer);
DROP FUNCTION rollup_bucket(double precision);
DROP TABLE query_rollups;
