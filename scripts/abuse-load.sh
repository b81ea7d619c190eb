#!/usr/bin/env bash
# Reproduces issue 10's abuse mix against a real serve (llmsim as the
# model, Postgres recording), on loopback only, bounded in time and count:
# 1,000 clients that open /ask and never read, 200 slow bodies (a byte every
# 5 s) and 1,000 slowloris connections (a header line every 5 s), next to a
# steady ask every 200 ms and a /healthz probe every 50 ms. It runs twice,
# each against a fresh serve: idle (steady client only) and under abuse, and
# prints the steady asks' TTFT p50/p99, /healthz p99 and serve's peak RSS.
# Bars: TTFT within 2x of idle, /healthz p99 <= 50 ms, peak RSS <= 300 MB.
#
# A third run, stall (60 s), checks --stream-write-timeout end to end:
# STALLERS clients (8: 4 per loopback address, within
# --max-concurrent-per-caller) ask for a 4,096-token answer of about 7 MB
# (scripts/abuseload's stallBody) from a model that streams it in about 4 s,
# more than loopback's socket buffers hold, and read nothing for 45 s; serve must
# cut each within 1-1.5 x the timeout (10 s) of its write blocking. It prints
# how many the clients saw cut and, from the queries serve recorded
# (cancelled, client_stalled), how many and after how long (e2e_ms).
#
#   scripts/abuse-load.sh                  30 s per run (the stall run 60 s)
#   DURATION=60s scripts/abuse-load.sh
#   RUNS=stall scripts/abuse-load.sh       only the stall run (RUNS="idle abuse stall" by default)
#   SERVE_FLAGS="--max-concurrent 0" scripts/abuse-load.sh     compare without a process bound
#
# The steady client asks 5 times a second from 127.0.0.1, above the default
# per-caller --rate of 60/min, so both runs give serve --rate 1000/min: the
# abusers (from 127.0.0.2) get that rate too, which makes their job easier,
# not harder.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/go/bin:$PATH
DURATION=${DURATION:-30s}   # whole seconds: 30s, 60s
BASE=${BENCH_DATABASE_BASE:-postgres://postgres@127.0.0.1:5432}
DB=${ABUSE_DATABASE:-ragtime_abuse}
URL="$BASE/$DB?sslmode=disable"
NONREADERS=${NONREADERS:-1000}
SLOWBODIES=${SLOWBODIES:-200}
SLOWLORIS=${SLOWLORIS:-1000}
STALLERS=${STALLERS:-8}
RUNS=${RUNS:-idle abuse stall}

# Each abusive connection is a descriptor in the load generator and one in
# serve: raise the soft limit when it is below what the mix needs.
need=$(( (NONREADERS + SLOWBODIES + SLOWLORIS) * 2 + 1024 ))
if [ "$(ulimit -n)" != unlimited ] && [ "$(ulimit -n)" -lt "$need" ]; then
  ulimit -n "$need" 2>/dev/null || ulimit -n "$(ulimit -Hn)"
  echo "raised ulimit -n to $(ulimit -n)" >&2
fi
if [ "$(ulimit -n)" != unlimited ] && [ "$(ulimit -n)" -lt "$need" ]; then
  echo "ulimit -n is $(ulimit -n) (hard $(ulimit -Hn)); the mix needs $need: lower NONREADERS/SLOWLORIS or raise the hard limit" >&2
  exit 1
fi

scripts/ensure-postgres.sh "$URL"
go build -o bin/ragtime ./cmd/ragtime
go build -o bin/abuseload ./scripts/abuseload
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

./bin/ragtime ingest --data-dir "$work/data" docs/ >/dev/null

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_up() { for _ in $(seq 100); do curl -sf "$1" >/dev/null && return 0; sleep 0.1; done; echo "$1 did not come up" >&2; return 1; }

# The model: 30 ms + 0.08 ms per prompt token of prefill and 32 tokens at 10 ms, so an idle ask's TTFT is
# about 70 ms as in the issue.
sim_port=$(free_port)
./bin/ragtime llmsim --addr "127.0.0.1:$sim_port" --prefill-ms 30 --itl-ms 10 --output-tokens 32 >"$work/llmsim.log" 2>&1 &
pids+=($!)
wait_up "http://127.0.0.1:$sim_port/v1/models"
# The stall run's model answers at length and fast: 4,096 tokens 1 ms apart.
long_port=$(free_port)
./bin/ragtime llmsim --addr "127.0.0.1:$long_port" --prefill-ms 30 --itl-ms 1 --output-tokens 4096 >"$work/llmsim-long.log" 2>&1 &
pids+=($!)
wait_up "http://127.0.0.1:$long_port/v1/models"

# one_run LABEL ABUSE-FLAGS...: a fresh serve, the load, then serve's peak RSS.
# The model is llmsim at $model_port (sim_port unless a run says otherwise),
# the run lasts $run_for (DURATION unless a run says otherwise), and the
# steady client takes $steady_flags.
one_run() {
  local label=$1; shift
  local port; port=$(free_port)
  local run_for=${run_for:-$DURATION}
  # shellcheck disable=SC2086
  ./bin/ragtime serve --addr "127.0.0.1:$port" --database-url "$URL" --data-dir "$work/data" \
    --llm-provider openai --llm-base-url "http://127.0.0.1:${model_port:-$sim_port}/v1" --llm-model sim \
    --rate 1000/min --log-format json ${SERVE_FLAGS:-} >"$work/serve-$label.out" 2>"$work/serve-$label.log" &
  local spid=$!
  pids+=($spid)
  wait_up "http://127.0.0.1:$port/healthz"
  # The abusers run in their own process, started 2 s ahead of the measured
  # client, which waits no longer for them.
  local apid=
  if [ $# -gt 0 ]; then
    timeout 400 ./bin/abuseload --url "http://127.0.0.1:$port" --duration "$(( ${run_for%s} + 2 ))s" --label "$label" --steady=false "$@" &
    apid=$!
    sleep 2
  fi
  # shellcheck disable=SC2086
  timeout 400 ./bin/abuseload --url "http://127.0.0.1:$port" --duration "$run_for" --label "$label" ${steady_flags:-}
  [ -z "$apid" ] || wait "$apid"
  echo "$label: serve peak RSS $(awk '/VmHWM/ {printf "%.1f MB", $2/1024}' "/proc/$spid/status"), threads $(awk '/Threads/ {print $2}' "/proc/$spid/status")"
  kill -INT "$spid"; wait "$spid" 2>/dev/null || true
  echo "$label: serve logged $(grep -c '"level":"ERROR"' "$work/serve-$label.log" || true) errors"
}

echo "== $(date -u +%FT%TZ), $(nproc) cores, DURATION=$DURATION, SERVE_FLAGS=${SERVE_FLAGS:-}"
for r in $RUNS; do
  case $r in
  idle) one_run idle ;;
  abuse) one_run abuse --nonreaders "$NONREADERS" --slowbodies "$SLOWBODIES" --slowloris "$SLOWLORIS" ;;
  stall)
    since=$(date -u '+%F %T.%6N+00')
    # The steady client keeps to short answers (max_tokens 32, as in the other runs).
    model_port=$long_port run_for=60s steady_flags="--steady-max-tokens 32" one_run stall --stallers "$STALLERS" --abuse-hosts $(( (STALLERS + 3) / 4 )) --stall-hold 45s
    # serve flushed its records when it stopped: the cuts as it recorded them.
    psql "$URL" -Atc "SELECT 'stall: serve recorded ' || count(*) || ' streams cut as client_stalled, after e2e p50 '
        || coalesce(round(percentile_cont(0.5) WITHIN GROUP (ORDER BY e2e_ms)::numeric / 1000, 1), 0) || ' s, min '
        || coalesce(round(min(e2e_ms)::numeric / 1000, 1), 0) || ' s, max ' || coalesce(round(max(e2e_ms)::numeric / 1000, 1), 0)
        || ' s; ' || coalesce(round(avg(completion_tokens)), 0) || ' of 4096 tokens generated per cut stream'
      FROM queries WHERE error_code = 'client_stalled' AND created_at >= '$since'"
    ;;
  *) echo "RUNS: unknown run $r (want idle, abuse or stall)" >&2; exit 2 ;;
  esac
done
