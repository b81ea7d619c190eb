#!/usr/bin/env bash
# Measures the dashboard views at scale: fills a separate database with
# generated queries (10 million by default, spread over 30 days, with their
# stages, in day partitions, and their roll-ups) and prints EXPLAIN (ANALYZE,
# BUFFERS) of each documented example query, the figures of docs/recording.md
# ("Postgres at scale": the 24-hour stage percentiles, the 30-day TTFT tail,
# a lookup by id, the roll-ups' percentile error against exact), then times
# dropping a day. Not part of `make test`: generating 10M queries takes about
# a quarter of an hour and ~20 GB of disk on 2 cores.
#
#   scripts/bench-views.sh                 generate (once) and explain
#   ROWS=1000000 scripts/bench-views.sh    a smaller table
#   REGENERATE=1 scripts/bench-views.sh    drop and generate again
#   PRUNE=1 scripts/bench-views.sh         also drop the oldest day (`ragtime prune`), then another by hand
#   DROP_DB=1 scripts/bench-views.sh       drop the bench database at the end
set -euo pipefail
cd "$(dirname "$0")/.."
ROWS=${ROWS:-10000000}
BASE=${BENCH_DATABASE_BASE:-postgres://postgres@127.0.0.1:5432}
DB=${BENCH_DATABASE:-ragtime_bench_views}
URL="$BASE/$DB?sslmode=disable"
export PATH=/usr/local/go/bin:$PATH

scripts/ensure-postgres.sh "$URL"
psql_() { psql -X -q -v ON_ERROR_STOP=1 "$@"; }

if [ "${REGENERATE:-}" = 1 ]; then
  psql_ "$BASE/postgres?sslmode=disable" -c "DROP DATABASE IF EXISTS $DB WITH (FORCE)"
fi
go build -o bin/ragtime ./cmd/ragtime
have=$(psql -X -Atc "SELECT count(*) FROM queries" "$URL" 2>/dev/null || echo 0)
if [ "$have" != "$ROWS" ]; then
  psql_ "$BASE/postgres?sslmode=disable" -c "DROP DATABASE IF EXISTS $DB WITH (FORCE)"
  psql_ "$BASE/postgres?sslmode=disable" -c "CREATE DATABASE $DB"
  ./bin/ragtime migrate --database-url "$URL"
  echo "generating $ROWS queries over 30 days, with their stages ($(date +%T))" >&2
  time psql_ "$URL" -v rows="$ROWS" <<'SQL'
SET maintenance_work_mem = '2GB';
SET max_parallel_maintenance_workers = 2;
SELECT setseed(0.42);
-- Load without indexes and constraints, then build them: much faster than
-- maintaining them row by row, and the result is the same.
-- A partition per day of the 30, then load without indexes and primary
-- keys and build them afterwards: much faster than maintaining them row by
-- row, and the result is the same.
SELECT create_query_partitions(((now() - interval '31 days') AT TIME ZONE 'UTC')::date, (now() AT TIME ZONE 'UTC')::date);
CREATE TEMP TABLE saved_indexes AS
  SELECT indexrelid::regclass::text AS name, replace(pg_get_indexdef(indexrelid), ' ON ONLY ', ' ON ') AS def
  FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid
  WHERE c.relname IN ('queries', 'query_stages') AND NOT i.indisprimary;
DO $$ DECLARE r record; BEGIN
  FOR r IN SELECT name FROM saved_indexes LOOP EXECUTE 'DROP INDEX ' || r.name; END LOOP;
END $$;
ALTER TABLE query_stages DROP CONSTRAINT query_stages_pkey;
ALTER TABLE queries DROP CONSTRAINT queries_pkey;

-- A time-ordered id (UUIDv7) for a query created at ts, as ragtime makes them.
CREATE FUNCTION pg_temp.id_at(ts timestamptz) RETURNS uuid LANGUAGE sql AS $f$
  SELECT (substr(h, 1, 8) || '-' || substr(h, 9, 4) || '-' || substr(h, 13, 4) || '-' || substr(h, 17, 4) || '-' || substr(h, 21, 12))::uuid
  FROM (SELECT lpad(to_hex((extract(epoch FROM ts) * 1000)::bigint), 12, '0') || '7' || substr(r, 14, 3) || substr(r, 17, 16) AS h
        FROM (SELECT replace(gen_random_uuid()::text, '-', '') AS r) x) y
$f$;

-- Two models; top_k in {3,5,8,10,20}; 2% errors, 1% cancelled; prefill grows
-- with top_k and 4% of queries queue behind a long prefill (the bimodal tail);
-- 90% of LLM calls reuse their connection; a third of prompt tokens cached.
INSERT INTO queries (id, created_at, question, question_sha256, top_k, rerank_top_n, max_tokens, model, provider,
  status, error_code, error_message, ttft_ms, first_token_ms, e2e_ms, queue_ms, retrieval_ms, gen_ttft_ms,
  llm_prefill_ms, overhead_ms, retrieval_share, prefill_share, prompt_tokens, completion_tokens, cached_tokens,
  reasoning_tokens, conn_reused, upstream_status)
SELECT id, ts, 'generated question ' || (i % 5000), md5((i % 5000)::text), k, least(k, 3), 256, model, 'llmsim',
  status, CASE WHEN status = 'error' THEN 'llm_unavailable' END, CASE WHEN status = 'error' THEN 'generated' END,
  CASE WHEN status = 'ok' THEN retrieval + connect + prefill + 0.2 END,
  CASE WHEN status = 'ok' THEN retrieval + connect + prefill + 0.2 END,
  retrieval + connect + prefill + 0.2 + CASE WHEN status = 'ok' THEN decode ELSE 0 END,
  0, retrieval, connect + prefill, prefill,
  CASE WHEN status = 'ok' THEN 0.2 END,
  CASE WHEN status = 'ok' THEN retrieval / (retrieval + connect + prefill + 0.2) END,
  CASE WHEN status = 'ok' THEN prefill / (retrieval + connect + prefill + 0.2) END,
  prompt, 120, (prompt * r3 * 0.66)::int, 0, reused, CASE WHEN status = 'error' THEN 503 ELSE 200 END
FROM (
  SELECT i, pg_temp.id_at(ts) AS id, ts,
    k, model, 400 + 180 * k AS prompt,
    CASE WHEN r1 < 0.02 THEN 'error' WHEN r1 < 0.03 THEN 'cancelled' ELSE 'ok' END AS status,
    (3 + 0.25 * k) * (0.8 + 0.4 * r2) AS retrieval,
    CASE WHEN r4 < 0.9 THEN 0.05 ELSE 30 + 60 * r2 END AS connect,
    (80 + 12 * k) * (0.8 + 0.4 * r3) * CASE WHEN r5 < 0.04 THEN 7 ELSE 1 END AS prefill,
    120 * 8 * (0.9 + 0.2 * r2) AS decode,
    r3, r4 < 0.9 AS reused
  FROM (
    SELECT i, now() - interval '30 days' + (i::float8 / :rows) * interval '30 days' AS ts,
      (ARRAY[3, 5, 8, 10, 20])[1 + (i % 5)] AS k,
      CASE WHEN i % 3 = 0 THEN 'sim-large' ELSE 'sim-small' END AS model,
      random() AS r1, random() AS r2, random() AS r3, random() AS r4, random() AS r5
    FROM generate_series(1, :rows) i
  ) a
) b;
\echo queries loaded

INSERT INTO query_stages (query_id, seq, name, start_ms, duration_ms, attrs, created_at)
SELECT q.id, s.seq, s.name,
  CASE s.name WHEN 'embed' THEN 0 WHEN 'search' THEN 0.3 * q.retrieval_ms WHEN 'rerank' THEN 0.5 * q.retrieval_ms
    WHEN 'assemble' THEN 0.8 * q.retrieval_ms WHEN 'llm_connect' THEN q.retrieval_ms + 0.1
    WHEN 'llm_prefill' THEN q.retrieval_ms + 0.1 + q.gen_ttft_ms - q.llm_prefill_ms ELSE q.ttft_ms END,
  CASE s.name WHEN 'embed' THEN 0.3 * q.retrieval_ms WHEN 'search' THEN 0.2 * q.retrieval_ms
    WHEN 'rerank' THEN 0.3 * q.retrieval_ms WHEN 'assemble' THEN 0.2 * q.retrieval_ms
    WHEN 'llm_connect' THEN q.gen_ttft_ms - q.llm_prefill_ms WHEN 'llm_prefill' THEN q.llm_prefill_ms
    ELSE q.e2e_ms - q.ttft_ms END,
  NULL, q.created_at
FROM queries q
CROSS JOIN (VALUES (1, 'embed'), (2, 'search'), (3, 'rerank'), (4, 'assemble'),
                   (5, 'llm_connect'), (6, 'llm_prefill'), (7, 'llm_decode')) AS s(seq, name)
WHERE q.status = 'ok' OR s.seq <= 4;
\echo stages loaded

ALTER TABLE queries ADD CONSTRAINT queries_pkey PRIMARY KEY (id, created_at);
ALTER TABLE query_stages ADD CONSTRAINT query_stages_pkey PRIMARY KEY (created_at, query_id, seq) INCLUDE (name, duration_ms);
DO $$ DECLARE r record; BEGIN
  FOR r IN SELECT def FROM saved_indexes LOOP EXECUTE r.def; END LOOP;
END $$;
\echo indexes built
-- The roll-ups the recorder would have written as the queries arrived.
\timing on
SELECT rollup_fill('-infinity', 'infinity') AS rollup_rows;
\timing off
VACUUM ANALYZE queries;
VACUUM ANALYZE query_stages;
VACUUM ANALYZE query_rollups;
SQL
fi

# Migrations added since the data was generated (time it: a backfill may run).
time ./bin/ragtime migrate --database-url "$URL"
psql_ "$URL" -c "VACUUM ANALYZE query_stages"
psql -X -Atc "SELECT 'queries: ' || count(*) || ', stages: ' || (SELECT count(*) FROM query_stages) || ', database: ' || pg_size_pretty(pg_database_size(current_database())) FROM queries" "$URL"

# Each documented example query (docs/sql.md), run twice: the first run reads
# from disk, the second shows the warm figure that a dashboard refresh sees.
explain() {
  echo
  echo "=== $1"
  psql -X -Atc "EXPLAIN (ANALYZE, BUFFERS) $1" "$URL" >/dev/null
  psql -X -Atc "EXPLAIN (ANALYZE, BUFFERS) $1" "$URL"
}
explain "SELECT * FROM stage_percentiles(now() - interval '1 hour')"
explain "SELECT * FROM stage_percentiles(now() - interval '24 hours')"
explain "SELECT * FROM ttft_tail WHERE hour >= now() - interval '24 hours' ORDER BY hour, model"
explain "SELECT * FROM topk_tradeoff(now() - interval '1 hour')"
explain "SELECT * FROM topk_tradeoff"
explain "SELECT * FROM cache_hit_rate WHERE hour >= now() - interval '24 hours' ORDER BY hour, model"
explain "SELECT * FROM network_health WHERE hour >= now() - interval '24 hours' ORDER BY hour, provider"
explain "SELECT * FROM slow_queries WHERE created_at >= now() - interval '1 hour' ORDER BY ttft_ms DESC NULLS LAST LIMIT 20"
explain "SELECT * FROM slow_queries WHERE created_at >= now() - interval '24 hours' ORDER BY ttft_ms DESC NULLS LAST LIMIT 20"
explain "SELECT * FROM ttft_breakdown WHERE created_at >= now() - interval '1 hour' ORDER BY created_at DESC LIMIT 50"
explain "SELECT id, created_at FROM queries WHERE model = 'sim-large' AND created_at < now() - interval '2 days' ORDER BY created_at DESC, id DESC LIMIT 50"
explain "SELECT id, created_at FROM queries WHERE status = 'error' ORDER BY created_at DESC, id DESC LIMIT 50"

# The figures of docs/recording.md, "Postgres at scale" (warm: each run twice).
timed() {
  echo
  echo "=== $1"
  psql -X -Atc "$2" "$URL" >/dev/null
  psql -X -At -c '\timing on' -c "$2" "$URL" | grep -E '^Time:' | tail -1
}
timed "24-hour stage percentiles (roll-ups)" "SELECT * FROM stage_percentiles(now() - interval '24 hours')"
timed "24-hour stage percentiles, exact from raw rows (what the roll-ups replace)" \
  "SELECT s.name, percentile_cont(ARRAY[0.5, 0.9, 0.95, 0.99]) WITHIN GROUP (ORDER BY s.duration_ms) FROM query_stages s JOIN queries q ON q.id = s.query_id AND q.created_at = s.created_at WHERE s.created_at >= now() - interval '24 hours' GROUP BY q.provider, q.model, s.name"
timed "30-day TTFT tail by hour (roll-ups)" "SELECT * FROM ttft_tail WHERE hour >= now() - interval '30 days' ORDER BY hour, provider, model"
explain "SELECT * FROM ttft_tail WHERE hour >= now() - interval '30 days' ORDER BY hour, provider, model"
explain "SELECT * FROM stage_percentiles(now() - interval '24 hours')"

# GET /v1/queries/:id: the statements GetQuery runs, for an id in the middle
# of the range: the window the id's time gives (one partition), and the
# fallback for an id without a time (every partition).
IFS="|" read -r ID AT < <(psql -X -Atc "SELECT id, created_at FROM queries WHERE created_at >= now() - interval '15 days' ORDER BY created_at LIMIT 1" "$URL")
IFS="|" read -r LO HI < <(psql -X -Atc "SELECT t - interval '15 minutes', t + interval '1 minute' FROM (SELECT to_timestamp(('x' || substr(replace('$ID', '-', ''), 1, 12))::bit(48)::bigint / 1000.0) AS t) x" "$URL")
explain "SELECT id, created_at, model FROM queries WHERE id = '$ID' AND created_at >= '$LO' AND created_at < '$HI'"
explain "SELECT seq, name, start_ms, duration_ms, attrs FROM query_stages WHERE query_id = '$ID' AND created_at = timestamptz '$AT' ORDER BY seq"
explain "SELECT id, created_at, model FROM queries WHERE id = '$ID'"

# The roll-ups' percentile error against exact, per provider, model and
# stage: over the last 24 hours (stages) and per hour over 30 days (TTFT).
echo
echo "=== roll-up percentiles against exact (relative error, over every provider, model, stage and percentile)"
psql -X -A -F ' ' "$URL" <<'SQL'
WITH w AS (SELECT date_trunc('hour', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' - interval '24 hours' AS since),
exact AS (
  SELECT q.provider, q.model, s.name AS stage,
         percentile_cont(ARRAY[0.5, 0.9, 0.95, 0.99]) WITHIN GROUP (ORDER BY s.duration_ms) AS p
  FROM query_stages s JOIN queries q ON q.id = s.query_id AND q.created_at = s.created_at, w
  WHERE s.created_at >= w.since AND q.created_at >= w.since GROUP BY 1, 2, 3),
rolled AS (
  SELECT provider, model, stage, rollup_percentiles(rollup_hist_sum(hist), ARRAY[0.5, 0.9, 0.95, 0.99]) AS p
  FROM query_rollups, w WHERE span = 'hour' AND start >= w.since GROUP BY 1, 2, 3),
errs AS (
  SELECT abs(r.p[i] - e.p[i]) / nullif(e.p[i], 0) AS err FROM exact e JOIN rolled r USING (provider, model, stage), generate_series(1, 4) i)
SELECT '24h stages' AS what, count(*) AS percentiles, round(100 * max(err)::numeric, 3) AS max_error_pct,
       round(100 * avg(err)::numeric, 3) AS mean_error_pct FROM errs
UNION ALL
SELECT '30d ttft by hour', count(*), round(100 * max(err)::numeric, 3), round(100 * avg(err)::numeric, 3) FROM (
  SELECT abs(r.p[i] - e.p[i]) / nullif(e.p[i], 0) AS err
  FROM (SELECT date_trunc('hour', created_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' AS hour, provider, model,
               percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP (ORDER BY ttft_ms) AS p
        FROM queries WHERE ttft_ms IS NOT NULL GROUP BY 1, 2, 3) e
  JOIN (SELECT start AS hour, provider, model, rollup_percentiles(hist, ARRAY[0.5, 0.95, 0.99]) AS p
        FROM query_rollups WHERE span = 'hour' AND stage = 'ttft') r USING (hour, provider, model),
  generate_series(1, 3) i) t;
SQL

if [ "${PRUNE:-}" = 1 ]; then
  # A cutoff just after the midnight that ends the oldest day: that day is
  # dropped whole, and less than an hour of the next is deleted row by row.
  hours=$(psql -X -Atc "SELECT floor(extract(epoch FROM now() - (date_trunc('day', (now() - interval '29 days') AT TIME ZONE 'UTC') AT TIME ZONE 'UTC')) / 3600)::int" "$URL")
  echo
  echo "=== ragtime prune --older-than ${hours}h (the oldest day whole, and the first minutes of the next)"
  time ./bin/ragtime prune --database-url "$URL" --older-than "${hours}h"
  day=$(psql -X -Atc "SELECT min(c.relname) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = 'queries'::regclass AND c.relname ~ '^queries_p'" "$URL")
  echo
  echo "=== dropping the next day by hand: $(psql -X -Atc "SELECT count(*) FROM $day" "$URL") queries and their stages"
  psql -X -q -c '\timing on' -c "BEGIN" -c "DROP TABLE ${day/queries_/query_stages_}, $day" -c "COMMIT" "$URL"
fi
if [ "${DROP_DB:-}" = 1 ]; then
  psql_ "$BASE/postgres?sslmode=disable" -c "DROP DATABASE IF EXISTS $DB WITH (FORCE)"
fi
