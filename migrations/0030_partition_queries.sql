-- queries and query_stages become partitioned by day on created_at (UTC
-- days), so that retention drops a day as one table instead of deleting
-- millions of rows, and a window's reads touch only its days. See
-- docs/recording.md, "Postgres at scale", for the key and index argument:
--
-- * The primary keys must hold the partition key: queries (id, created_at),
--   query_stages (query_id, created_at, seq). A query id is a UUID (random
--   or, since this change, time-ordered v7), so (id, created_at) is as unique
--   as id was; the recorder's ON CONFLICT names both.
-- * The stages' foreign key to queries goes: a foreign key into a
--   partitioned table would make dropping a day check every stage, and the
--   recorder already inserts a query's stages in the statement that inserts
--   the query (and only if it did). Retention drops the same day of both.
-- * Every other index is rebuilt as a partitioned index under its own name.
--
-- Partitions are named queries_pYYYYMMDD / query_stages_pYYYYMMDD and made
-- by create_query_partitions(first, last); a DEFAULT partition of each takes
-- a row no day partition covers, so an insert never fails, and
-- create_query_partitions moves such strays into the day's partition when it
-- makes it. ragtime calls it at migrate, at serve start and every hour, for
-- today through 7 days ahead.
--
-- The conversion moves every row, in this migration's transaction: the
-- views reading the tables are saved, dropped and made again from their
-- saved definitions, so whatever the earlier migrations defined stays.

-- +goose Up
-- +goose StatementBegin
CREATE FUNCTION create_query_partitions(first_day date, last_day date) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    d date;
    t text;
    part text;
    lo timestamptz;
    hi timestamptz;
    made integer := 0;
BEGIN
    -- Replicas starting at once take turns.
    PERFORM pg_advisory_xact_lock(7496754311201545);
    FOR d IN SELECT g::date FROM generate_series(first_day, last_day, interval '1 day') g LOOP
        lo := d::timestamp AT TIME ZONE 'UTC';
        hi := (d + 1)::timestamp AT TIME ZONE 'UTC';
        FOREACH t IN ARRAY ARRAY['queries', 'query_stages'] LOOP
            part := t || '_p' || to_char(d, 'YYYYMMDD');
            CONTINUE WHEN to_regclass(part) IS NOT NULL;
            EXECUTE format('CREATE TABLE %I (LIKE %I INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING STORAGE)', part, t);
            -- Rows that landed in the default partition for that day move in
            -- (attaching would fail while the default holds any).
            IF to_regclass(t || '_default') IS NOT NULL THEN
                EXECUTE format('WITH moved AS (DELETE FROM %I WHERE created_at >= $1 AND created_at < $2 RETURNING *) '
                               'INSERT INTO %I SELECT * FROM moved', t || '_default', part) USING lo, hi;
            END IF;
            -- Attaching locks the parent less than CREATE ... PARTITION OF
            -- (SHARE UPDATE EXCLUSIVE: reads and inserts go on).
            EXECUTE format('ALTER TABLE %I ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)', t, part, lo, hi);
            made := made + 1;
        END LOOP;
    END LOOP;
    RETURN made;
END
$$;
-- +goose StatementEnd

COMMENT ON FUNCTION create_query_partitions(date, date) IS 'Makes the day partitions (UTC days first_day..last_day) of queries and query_stages that do not exist yet, moving rows of those days out of the default partitions; returns how many tables it made. ragtime calls it for today through 7 days ahead at migrate, at serve start and hourly.';

-- +goose StatementBegin
DO $$
DECLARE
    r record;
    d date;
BEGIN
    -- The views over the two tables (and views over those), oldest first.
    CREATE TEMP TABLE saved_views ON COMMIT DROP AS
    WITH RECURSIVE deps(oid) AS (
        SELECT rw.ev_class FROM pg_depend dp JOIN pg_rewrite rw ON rw.oid = dp.objid
        WHERE dp.classid = 'pg_rewrite'::regclass AND dp.refclassid = 'pg_class'::regclass
          AND dp.refobjid IN ('queries'::regclass, 'query_stages'::regclass)
        UNION
        SELECT rw.ev_class FROM deps JOIN pg_depend dp ON dp.refobjid = deps.oid AND dp.classid = 'pg_rewrite'::regclass
        JOIN pg_rewrite rw ON rw.oid = dp.objid
    )
    SELECT c.oid, c.relname::text AS name, pg_get_viewdef(c.oid) AS def, obj_description(c.oid, 'pg_class') AS comment
    FROM pg_class c WHERE c.oid IN (SELECT oid FROM deps) AND c.relkind = 'v';

    CREATE TEMP TABLE saved_indexes ON COMMIT DROP AS
    SELECT pg_get_indexdef(i.indexrelid) AS def
    FROM pg_index i WHERE i.indrelid IN ('queries'::regclass, 'query_stages'::regclass) AND NOT i.indisprimary;

    CREATE TEMP TABLE saved_fks ON COMMIT DROP AS
    SELECT conname::text AS name, pg_get_constraintdef(oid) AS def
    FROM pg_constraint WHERE conrelid = 'queries'::regclass AND contype = 'f';

    CREATE TEMP TABLE saved_comments ON COMMIT DROP AS
    SELECT relname::text AS name, obj_description(oid, 'pg_class') AS comment
    FROM pg_class WHERE oid IN ('queries'::regclass, 'query_stages'::regclass);

    FOR r IN SELECT name FROM saved_views ORDER BY oid DESC LOOP
        EXECUTE format('DROP VIEW %I', r.name);
    END LOOP;

    ALTER TABLE queries RENAME TO queries_unpartitioned;
    ALTER TABLE query_stages RENAME TO query_stages_unpartitioned;
    CREATE TABLE queries (LIKE queries_unpartitioned INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING COMMENTS INCLUDING STORAGE)
        PARTITION BY RANGE (created_at);
    CREATE TABLE query_stages (LIKE query_stages_unpartitioned INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING COMMENTS INCLUDING STORAGE)
        PARTITION BY RANGE (created_at);
    CREATE TABLE queries_default PARTITION OF queries DEFAULT;
    CREATE TABLE query_stages_default PARTITION OF query_stages DEFAULT;

    -- A partition per day that has rows, and today through a week ahead.
    FOR d IN SELECT DISTINCT (created_at AT TIME ZONE 'UTC')::date FROM queries_unpartitioned LOOP
        PERFORM create_query_partitions(d, d);
    END LOOP;
    PERFORM create_query_partitions((now() AT TIME ZONE 'UTC')::date, (now() AT TIME ZONE 'UTC')::date + 7);

    INSERT INTO queries SELECT * FROM queries_unpartitioned;
    INSERT INTO query_stages SELECT * FROM query_stages_unpartitioned;
    DROP TABLE query_stages_unpartitioned;
    DROP TABLE queries_unpartitioned;

    ALTER TABLE queries ADD CONSTRAINT queries_pkey PRIMARY KEY (id, created_at);
    ALTER TABLE query_stages ADD CONSTRAINT query_stages_pkey PRIMARY KEY (query_id, created_at, seq);
    FOR r IN SELECT def FROM saved_indexes LOOP
        EXECUTE r.def;
    END LOOP;
    FOR r IN SELECT name, def FROM saved_fks LOOP
        EXECUTE format('ALTER TABLE queries ADD CONSTRAINT %I %s', r.name, r.def);
    END LOOP;
    FOR r IN SELECT name, comment FROM saved_comments LOOP
        EXECUTE format('COMMENT ON TABLE %I IS %L', r.name, r.comment);
    END LOOP;
    FOR r IN SELECT name, def, comment FROM saved_views ORDER BY oid LOOP
        EXECUTE format('CREATE VIEW %I AS %s', r.name, r.def);
        EXECUTE format('COMMENT ON VIEW %I IS %L', r.name, r.comment);
    END LOOP;
END
$$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
DO $$
DECLARE
    r record;
BEGIN
    CREATE TEMP TABLE saved_views ON COMMIT DROP AS
    WITH RECURSIVE deps(oid) AS (
        SELECT rw.ev_class FROM pg_depend dp JOIN pg_rewrite rw ON rw.oid = dp.objid
        WHERE dp.classid = 'pg_rewrite'::regclass AND dp.refclassid = 'pg_class'::regclass
          AND dp.refobjid IN ('queries'::regclass, 'query_stages'::regclass)
        UNION
        SELECT rw.ev_class FROM deps JOIN pg_depend dp ON dp.refobjid = deps.oid AND dp.classid = 'pg_rewrite'::regclass
        JOIN pg_rewrite rw ON rw.oid = dp.objid
    )
    SELECT c.oid, c.relname::text AS name, pg_get_viewdef(c.oid) AS def, obj_description(c.oid, 'pg_class') AS comment
    FROM pg_class c WHERE c.oid IN (SELECT oid FROM deps) AND c.relkind = 'v';

    CREATE TEMP TABLE saved_indexes ON COMMIT DROP AS
    SELECT replace(pg_get_indexdef(i.indexrelid), ' ON ONLY ', ' ON ') AS def
    FROM pg_index i WHERE i.indrelid IN ('queries'::regclass, 'query_stages'::regclass) AND NOT i.indisprimary;

    CREATE TEMP TABLE saved_fks ON COMMIT DROP AS
    SELECT conname::text AS name, pg_get_constraintdef(oid) AS def
    FROM pg_constraint WHERE conrelid = 'queries'::regclass AND contype = 'f';

    CREATE TEMP TABLE saved_comments ON COMMIT DROP AS
    SELECT relname::text AS name, obj_description(oid, 'pg_class') AS comment
    FROM pg_class WHERE oid IN ('queries'::regclass, 'query_stages'::regclass);

    FOR r IN SELECT name FROM saved_views ORDER BY oid DESC LOOP
        EXECUTE format('DROP VIEW %I', r.name);
    END LOOP;

    ALTER TABLE queries RENAME TO queries_partitioned;
    ALTER TABLE query_stages RENAME TO query_stages_partitioned;
    CREATE TABLE queries (LIKE queries_partitioned INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING COMMENTS INCLUDING STORAGE);
    CREATE TABLE query_stages (LIKE query_stages_partitioned INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING COMMENTS INCLUDING STORAGE);
    INSERT INTO queries SELECT * FROM queries_partitioned;
    INSERT INTO query_stages SELECT * FROM query_stages_partitioned;
    DROP TABLE query_stages_partitioned;
    DROP TABLE queries_partitioned;

    ALTER TABLE queries ADD CONSTRAINT queries_pkey PRIMARY KEY (id);
    ALTER TABLE query_stages ADD CONSTRAINT query_stages_pkey PRIMARY KEY (query_id, seq);
    ALTER TABLE query_stages ADD CONSTRAINT query_stages_query_id_fkey
        FOREIGN KEY (query_id) REFERENCES queries (id) ON DELETE CASCADE;
    FOR r IN SELECT def FROM saved_indexes LOOP
        EXECUTE r.def;
    END LOOP;
    FOR r IN SELECT name, def FROM saved_fks LOOP
        EXECUTE format('ALTER TABLE queries ADD CONSTRAINT %I %s', r.name, r.def);
    END LOOP;
    FOR r IN SELECT name, comment FROM saved_comments LOOP
        EXECUTE format('COMMENT ON TABLE %I IS %L', r.name, r.comment);
    END LOOP;
    FOR r IN SELECT name, def, comment FROM saved_views ORDER BY oid LOOP
        EXECUTE format('CREATE VIEW %I AS %s', r.name, r.def);
        EXECUTE format('COMMENT ON VIEW %I IS %L', r.name, r.comment);
    END LOOP;
END
$$;
-- +goose StatementEnd
DROP FUNCTION create_query_partitions(date, date);
