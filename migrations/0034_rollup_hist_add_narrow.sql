-- rollup_hist_add(a, b) built the sum of two histograms by filling an array
-- as wide as both and adding each one into it, bucket by bucket, in
-- PL/pgSQL: its cost followed the wider histogram, which is the stored
-- one. The recorder's upsert adds a batch's narrow histogram (a minute of
-- one stage spans a few buckets) to a stored hour row spanning ~170 each
-- time, and rollup_hist_sum adds every row of a window into a running sum
-- as wide as the window's. Now, when the narrower histogram's buckets lie
-- within the wider one's, the sum is a copy of the wider with the narrower
-- added into it: the cost follows the narrower (a 41-bucket histogram into
-- a 170-bucket one: 19 µs instead of 160 µs; 1 bucket: 7 µs instead of
-- 103 µs). Otherwise it is built as before. The result is the same array,
-- bounds included.

-- +goose Up
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION rollup_hist_add(a bigint[], b bigint[]) RETURNS bigint[]
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
    r bigint[];
    i integer;
BEGIN
    IF a IS NULL THEN RETURN b; END IF;
    IF b IS NULL THEN RETURN a; END IF;
    IF cardinality(b) > cardinality(a) THEN
        r := a; a := b; b := r;
    END IF;
    IF array_lower(b, 1) >= array_lower(a, 1) AND array_upper(b, 1) <= array_upper(a, 1) THEN
        r := a;
        FOR i IN array_lower(b, 1) .. array_upper(b, 1) LOOP
            r[i] := r[i] + b[i];
        END LOOP;
        RETURN r;
    END IF;
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

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION rollup_hist_add(a bigint[], b bigint[]) RETURNS bigint[]
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
