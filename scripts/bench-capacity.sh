#!/usr/bin/env bash
# make bench-capacity: the figures of docs/scaling.md's capacity model that
# docs/performance.md does not give. REPLICAS `ragtime serve` processes (one
# writer and read-only followers on one embedded index, recording into one
# PostgreSQL) answer ASKS asks, PARALLEL at a time spread round-robin over the
# replicas, streamed from `ragtime llmsim`. Prints asks/s, ragtime's CPU ms per
# ask (utime+stime of every replica from /proc), and what PostgreSQL received
# per query: rows and heap+index bytes (not WAL: the server's WAL counters are
# cluster-wide, and the PostgreSQL here is shared). Loopback only; the load is
# bounded by ASKS. Knobs: ASKS=2000 PARALLEL=20 REPLICAS=2 ITL_MS=5
# MAX_TOKENS=64 EMBED_MS=2 BENCH_DATABASE=ragtime_bench_capacity (give two runs at once different names).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/go/bin:$PATH
ASKS=${ASKS:-2000}
PARALLEL=${PARALLEL:-20}
REPLICAS=${REPLICAS:-2}
ITL_MS=${ITL_MS:-5}
MAX_TOKENS=${MAX_TOKENS:-64}
EMBED_MS=${EMBED_MS:-2}
BASE=${BENCH_DATABASE_BASE:-postgres://postgres@127.0.0.1:5432}
DB=${BENCH_DATABASE:-ragtime_bench_capacity}
DB_URL="$BASE/$DB?sslmode=disable"
[ "$ASKS" -ge 1 ] && [ "$ASKS" -le 100000 ] || { echo "ASKS must be 1 to 100000" >&2; exit 2; }
[ "$REPLICAS" -ge 1 ] && [ "$REPLICAS" -le 8 ] || { echo "REPLICAS must be 1 to 8" >&2; exit 2; }

work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
  psql -qX "$BASE/postgres" -c "DROP DATABASE IF EXISTS $DB WITH (FORCE)" >/dev/null 2>&1 || true
}
trap cleanup EXIT

waitfor() {
  for _ in $(seq 600); do
    if m=$(grep -oE "$2" "$1" 2>/dev/null | head -1) && [ -n "$m" ]; then echo "$m"; return; fi
    sleep 0.1
  done
  echo "bench-capacity: no '$2' in $1 within 60 s:" >&2; cat "$1" >&2; exit 1
}
# cpu PID...: user+system clock ticks of the processes.
cpu() { local t=0; for p in "$@"; do t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat"))); done; echo "$t"; }
sql() { psql -qtAX "$DB_URL" -c "$1"; }

go build -o bin/ragtime ./cmd/ragtime
scripts/ensure-postgres.sh "$DB_URL"
psql -qX "$BASE/postgres" -c "DROP DATABASE IF EXISTS $DB WITH (FORCE)" -c "CREATE DATABASE $DB" >/dev/null 2>&1

./bin/ragtime llmsim --addr 127.0.0.1:0 --prefill-ms 15 --prefill-ms-per-token 0 --prefill-ms-quadratic 0 \
  --itl-ms "$ITL_MS" --output-tokens "$MAX_TOKENS" --embed-ms "$EMBED_MS" >"$work/sim.log" 2>&1 &
pids+=($!)
sim=$(waitfor "$work/sim.log" 'http://127\.0\.0\.1:[0-9]+/v1')

./bin/ragtime migrate --database-url "$DB_URL" >/dev/null
./bin/ragtime ingest --data-dir "$work/data" docs >/dev/null
urls=(); rpids=()
for i in $(seq "$REPLICAS"); do
  extra=()
  [ "$i" -gt 1 ] && extra=(--read-only --reload-interval 2s --spool-dir "$work/spool$i")
  ./bin/ragtime serve --addr 127.0.0.1:0 --database-url "$DB_URL" --data-dir "$work/data" "${extra[@]}" \
    --llm-provider openai --llm-base-url "$sim" --llm-model sim --max-concurrent 0 --max-concurrent-per-caller 0 --rate 0 \
    >"$work/ragtime$i.log" 2>&1 &
  pids+=($!); rpids+=($!)
  urls+=("$(waitfor "$work/ragtime$i.log" 'http://127\.0\.0\.1:[0-9]+')")
done

# One line per ask: its replica's URL; xargs runs PARALLEL curls at once.
asks() { for n in $(seq "$1"); do echo "${urls[$(( n % REPLICAS ))]}/ask?q=what+makes+the+first+token+slow%3F+$n"; done; }
asks 50 | xargs -P "$PARALLEL" -n 1 curl -sfN -o /dev/null   # warm-up
sleep 1
rows0=$(sql "SELECT count(*) FROM queries")
cpu0=$(cpu "${rpids[@]}"); t0=$(date +%s.%N)
asks "$ASKS" | xargs -P "$PARALLEL" -n 1 curl -sfN -o /dev/null
t1=$(date +%s.%N); cpu1=$(cpu "${rpids[@]}")
for _ in $(seq 100); do  # the recorders write asynchronously
  [ "$(sql "SELECT count(*) FROM queries")" -ge $((rows0 + ASKS)) ] && break; sleep 0.2
done
rows1=$(sql "SELECT count(*) FROM queries")
tick=$(getconf CLK_TCK)
stored=$((rows1 - rows0))
awk -v a="$ASKS" -v s="$stored" -v w="$(echo "$t1 - $t0" | bc)" -v c="$((cpu1 - cpu0))" -v tick="$tick" -v r="$REPLICAS" -v p="$PARALLEL" 'BEGIN {
  printf "replicas %d, %d asks at %d parallel in %.1f s: %.0f asks/s; ragtime CPU %.2f ms per ask (all replicas)\n", r, a, p, w, a / w, c * 1000 / tick / a
  printf "queries stored %d of %d\n", s, a
}'
# queries and query_stages are partitioned by day: their size is their
# partitions'; the roll-ups are per minute, model and stage, not per query.
size() { sql "SELECT coalesce(sum(pg_total_relation_size(relid)), 0) FROM pg_partition_tree('$1')"; }
n=$(sql "SELECT count(*) FROM queries")
raw=$(( $(size queries) + $(size query_stages) ))
rollups=$(sql "SELECT CASE WHEN to_regclass('query_rollups') IS NULL THEN 0 ELSE pg_total_relation_size('query_rollups') END")
sql "SELECT 'stage rows per query ' || round((SELECT count(*) FROM query_stages)::numeric / $n, 2)
  || '; raw rows: heap+index+toast ' || round($raw::numeric / $n) || ' bytes per query; roll-ups: ' || $rollups || ' bytes in all'"
load=$(cut -d' ' -f1-3 /proc/loadavg)
echo "load average $load ($(nproc) cores)"
for i in $(seq "$REPLICAS"); do
  if grep -qiE 'panic|level=ERROR' "$work/ragtime$i.log"; then echo "replica $i logged errors:" >&2; grep -iE 'panic|level=ERROR' "$work/ragtime$i.log" | head -5 >&2; fi
done
