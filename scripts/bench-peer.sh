#!/usr/bin/env bash
# make bench-peer: ragtime against a LangChain.js peer, both answering over the
# same documents (docs/) through the same `ragtime llmsim` (embeddings and
# chat), with the simulator measured directly as the baseline. Prints, per
# concurrency, the TTFT each service adds, asks/s, CPU ms per ask and RSS, with
# ratios (bench/peerload). Everything listens on 127.0.0.1; every load loop is
# bounded. Knobs (environment):
#   CONCURRENCY=1,10,100  ROUNDS=3  PER_STREAM=3 (asks per stream per trial)  MIN_ASKS=30  ITL_MS=5  PREFILL_MS=15
#   EMBED_MS=5  MAX_TOKENS=64  TOP_K=4  TARGETS=llmsim,ragtime,peer,relay (llmsim, the baseline, always runs)  TRIAL_TIMEOUT=90s
#   (relay is the floor: bench/relay makes the same two upstream calls as ragtime and relays
#   each chunk in one write, nothing else; its CPU per ask is what the wire alone costs on this machine)
#   STAGGER=0 (start a trial's streams spread over this span, e.g. 335ms, instead of all at once: steady arrivals, not waves)
#   BASELINE= (a git revision: instead of the peer, ragtime built at that revision runs in the peer's place,
#   with the same flags on the same llmsim, so old and new alternate in one run; e.g. BASELINE=0c8c517
#   TARGETS=llmsim,ragtime,peer CONCURRENCY=100 ROUNDS=5 PER_STREAM=6. The "peer" rows are then the baseline.
#   With HOLD, the held streams run against the baseline and this tree in turn, ROUNDS times: BASELINE=<rev> ROUNDS=2 make bench-streams)
#   PPROF_ADDR= (serve ragtime's profiler there, e.g. 127.0.0.1:6060; with HOLD_TARGET=relay, the relay's)
#   HOLD_PROFILE= (-hold, with PPROF_ADDR: write a 10 s CPU profile of the held target, from the first held probe, to this file)
#   SERVE_ENV= (environment for ragtime serve alone, not llmsim or the load client: e.g. SERVE_ENV="GOMEMLIMIT=200MiB GOGC=50")
#   SERVE_ARGS= (flags for this tree's ragtime serve alone, after the others so they win; with BASELINE=HEAD the cost of a
#   setting: e.g. SERVE_ARGS="--redis-url redis://127.0.0.1:6379/0 --rate 1000000/min --max-concurrent-per-caller 100000")
#   HOLD=0 (instead of the trials: hold this many streams open against ragtime and probe its TTFT, bench/peerload -hold)
#   HOLD_PROBES=100 (-hold: probe asks, one at a time, idle and then with the streams held)
#   HOLD_PROBE_EVERY=150ms (-hold: time between the probes' starts, so that 100 span 15 s, one held answer and more; 0: back to back)
#   HOLD_TARGET=ragtime (-hold: or relay, to hold the streams against the floor instead: HOLD_TARGET=relay make bench-streams)
#   MAX_CONCURRENT=0 (ragtime's --max-concurrent; the load comes from one
#   client address, so the per-caller limits are off: --max-concurrent-per-caller 0 --rate 0)
#   BENCH_DATABASE=ragtime_bench_peer (the database ragtime records into, created when missing; a BASELINE's is
#   BENCH_DATABASE_baseline_<rev>: give two runs at once different names)  BENCH_DATABASE_BASE=postgres://postgres@127.0.0.1:5432
# Needs Go, Node ≥ 20 with npm (the peer's packages are installed from npm into
# bench/peer/node_modules) and PostgreSQL (ragtime records every ask).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/go/bin:$PATH
CONCURRENCY=${CONCURRENCY:-1,10,100}
ROUNDS=${ROUNDS:-3}
PER_STREAM=${PER_STREAM:-3}
MIN_ASKS=${MIN_ASKS:-30}
ITL_MS=${ITL_MS:-5}
PREFILL_MS=${PREFILL_MS:-15}
EMBED_MS=${EMBED_MS:-5}
MAX_TOKENS=${MAX_TOKENS:-64}
TOP_K=${TOP_K:-4}
MAX_CONCURRENT=${MAX_CONCURRENT:-0}
TARGETS=${TARGETS:-llmsim,ragtime,peer,relay}
TRIAL_TIMEOUT=${TRIAL_TIMEOUT:-90s}
HOLD=${HOLD:-0}
HOLD_PROBES=${HOLD_PROBES:-100}
HOLD_PROBE_EVERY=${HOLD_PROBE_EVERY:-150ms}
HOLD_TARGET=${HOLD_TARGET:-ragtime}
case "$HOLD_TARGET" in
  ragtime) ;;
  relay) case ",$TARGETS," in *,relay,*) ;; *) TARGETS="$TARGETS,relay" ;; esac ;;
  *) echo "bench-peer: HOLD_TARGET must be ragtime or relay, got '$HOLD_TARGET'" >&2; exit 2 ;;
esac
STAGGER=${STAGGER:-0}
PPROF_ADDR=${PPROF_ADDR:-}
HOLD_PROFILE=${HOLD_PROFILE:-}
hold_profile=()
if [ -n "$HOLD_PROFILE" ]; then
  [ -n "$PPROF_ADDR" ] || { echo "bench-peer: HOLD_PROFILE needs PPROF_ADDR (the profiler it reads), e.g. PPROF_ADDR=127.0.0.1:6060" >&2; exit 2; }
  case "$HOLD_PROFILE" in /*) ;; *) HOLD_PROFILE="$PWD/$HOLD_PROFILE" ;; esac
  hold_profile=(-hold-profile "$HOLD_PROFILE" -hold-pprof "http://$PPROF_ADDR")
fi
SERVE_ENV=${SERVE_ENV:-}
SERVE_ARGS=${SERVE_ARGS:-}
BASELINE=${BASELINE:-}
pprof=() relay_pprof=()
if [ -n "$PPROF_ADDR" ]; then
  if [ "$HOLD_TARGET" = relay ]; then relay_pprof=(--pprof-addr "$PPROF_ADDR"); else pprof=(--pprof-addr "$PPROF_ADDR"); fi
fi
BASE=${BENCH_DATABASE_BASE:-postgres://postgres@127.0.0.1:5432}
DB=${BENCH_DATABASE:-ragtime_bench_peer}
DB_URL="$BASE/$DB?sslmode=disable"

work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# waitfor FILE REGEX: the first match of REGEX in FILE (a process's log), within 60 s.
waitfor() {
  for _ in $(seq 600); do
    if m=$(grep -oE "$2" "$1" 2>/dev/null | head -1) && [ -n "$m" ]; then echo "$m"; return; fi
    sleep 0.1
  done
  echo "bench-peer: no '$2' in $1 within 60 s:" >&2; cat "$1" >&2; exit 1
}

go build -o bin/ragtime ./cmd/ragtime
go build -o bin/peerload ./bench/peerload
go build -o bin/relay ./bench/relay
scripts/ensure-postgres.sh "$DB_URL"
# npm ci only when the installed packages are not those of the lock file.
case ",$TARGETS," in *,peer,*) with_peer=1 ;; *) with_peer= ;; esac
if [ -n "$BASELINE" ]; then
  [ -n "$with_peer" ] || [ "$HOLD" -gt 0 ] || { echo "bench-peer: BASELINE runs in the peer's place: TARGETS must include peer" >&2; exit 2; }
  git rev-parse --verify --quiet "$BASELINE^{commit}" >/dev/null || { echo "bench-peer: BASELINE=$BASELINE is not a git revision" >&2; exit 2; }
  git worktree add --quiet --detach "$work/baseline-src" "$BASELINE"
  (cd "$work/baseline-src" && go build -o "$work/ragtime-baseline" ./cmd/ragtime)
  git worktree remove --force "$work/baseline-src"
fi
[ -z "$with_peer" ] || [ -n "$BASELINE" ] || (cd bench/peer && if ! cmp -s package-lock.json node_modules/.ragtime-lock 2>/dev/null; then
  npm ci --no-audit --no-fund --loglevel=error && cp package-lock.json node_modules/.ragtime-lock; fi)

./bin/ragtime llmsim --addr 127.0.0.1:0 --prefill-ms "$PREFILL_MS" --prefill-ms-per-token 0 --prefill-ms-quadratic 0 \
  --itl-ms "$ITL_MS" --output-tokens "$MAX_TOKENS" --embed-ms "$EMBED_MS" --embed-ms-per-input 0.5 >"$work/sim.log" 2>&1 &
pids+=($!); sim_pid=$!
sim=$(waitfor "$work/sim.log" 'http://127\.0\.0\.1:[0-9]+/v1')

embed=(--embedder openai --embed-base-url "$sim" --embed-model sim-embed)
./bin/ragtime migrate --database-url "$DB_URL" >/dev/null
./bin/ragtime ingest --data-dir "$work/data" "${embed[@]}" docs >/dev/null
# serve_ragtime and serve_baseline start (again) the server under test and
# the baseline, setting ragtime/ragtime_pid and peer/peer_pid.
serve_ragtime() {
  # shellcheck disable=SC2086 # SERVE_ENV is a list of NAME=value words, SERVE_ARGS of flags
  env $SERVE_ENV ./bin/ragtime serve --addr 127.0.0.1:0 "${pprof[@]}" --database-url "$DB_URL" --data-dir "$work/data" "${embed[@]}" \
    --reranker none --llm-provider openai --llm-base-url "$sim" --llm-model sim --max-concurrent "$MAX_CONCURRENT" --max-concurrent-per-caller 0 --rate 0 \
    $SERVE_ARGS >"$work/ragtime.log" 2>&1 &
  pids+=($!); ragtime_pid=$!
  ragtime=$(waitfor "$work/ragtime.log" 'http://127\.0\.0\.1:[0-9]+')
}
serve_baseline() {
  "$work/ragtime-baseline" serve --addr 127.0.0.1:0 --database-url "$base_db" --data-dir "$work/data-baseline" "${embed[@]}" \
    --reranker none --top-k "$TOP_K" --rerank-top-n 0 --llm-provider openai --llm-base-url "$sim" --llm-model sim \
    --max-concurrent "$MAX_CONCURRENT" --max-concurrent-per-caller 0 --rate 0 >"$work/baseline.log" 2>&1 &
  pids+=($!); peer_pid=$!
  peer=$(waitfor "$work/baseline.log" 'http://127\.0\.0\.1:[0-9]+')
}
serve_ragtime

peer= peer_pid=0
if [ -n "$BASELINE" ]; then
  # One database per baseline revision: one migrated by a newer build is refused by an older one.
  base_db="$BASE/${DB}_baseline_$(git rev-parse --short=12 "$BASELINE")?sslmode=disable"
  scripts/ensure-postgres.sh "$base_db"
  "$work/ragtime-baseline" migrate --database-url "$base_db" >/dev/null
  cp -r "$work/data" "$work/data-baseline"
  serve_baseline
  echo "bench-peer: the peer rows below are ragtime at $BASELINE ($(git rev-parse --short "$BASELINE")), not the LangChain.js peer" >&2
elif [ -n "$with_peer" ]; then
  PEER_BASE_URL="$sim" PEER_DOCS=docs PEER_TOP_K="$TOP_K" PEER_MAX_TOKENS="$MAX_TOKENS" \
    node bench/peer/server.js >"$work/peer.log" 2>&1 &
  pids+=($!); peer_pid=$!
  peer=$(waitfor "$work/peer.log" 'http://127\.0\.0\.1:[0-9]+')
fi

relay= relay_pid=0
case ",$TARGETS," in *,relay,*)
  ./bin/relay --addr 127.0.0.1:0 "${relay_pprof[@]}" --base-url "$sim" --model sim --embed-model sim-embed --max-tokens "$MAX_TOKENS" >"$work/relay.log" 2>&1 &
  pids+=($!); relay_pid=$!
  relay=$(waitfor "$work/relay.log" 'http://127\.0\.0\.1:[0-9]+') ;;
esac

echo "llmsim $sim (pid $sim_pid), ragtime $ragtime (pid $ragtime_pid), peer ${peer:-not run} (pid $peer_pid), relay ${relay:-not run} (pid $relay_pid)" >&2
load() {
  ./bin/peerload -targets "$TARGETS" -sim "$sim" -ragtime "$1" -peer "$peer" -relay "$relay" -relay-pid "$relay_pid" -sim-pid "$sim_pid" -ragtime-pid "$2" -peer-pid "$peer_pid" \
    -hold "$HOLD" -hold-target "$HOLD_TARGET" -hold-probes "$HOLD_PROBES" -hold-probe-every "$HOLD_PROBE_EVERY" -concurrency "$CONCURRENCY" -trial-timeout "$TRIAL_TIMEOUT" -rounds "$ROUNDS" -asks-per-stream "$PER_STREAM" -min-asks "$MIN_ASKS" -max-tokens "$MAX_TOKENS" -top-k "$TOP_K" \
    -stagger "$STAGGER" -embed-model-ms "$(echo "$EMBED_MS + 0.5" | bc)" "${hold_profile[@]}"
}
if [ "$HOLD" -gt 0 ] && [ -n "$BASELINE" ]; then
  # Held streams against the baseline and this tree in turn, ROUNDS times,
  # the order swapped each round; one server idles while the other holds.
  # Both are started afresh each round, so each idle RSS is a fresh server's.
  for r in $(seq "$ROUNDS"); do
    if [ "$r" -gt 1 ]; then
      kill "$ragtime_pid" "$peer_pid"; wait "$ragtime_pid" "$peer_pid" 2>/dev/null || true
      serve_ragtime; serve_baseline
    fi
    for which in $( [ $((r % 2)) = 1 ] && echo "baseline this" || echo "this baseline"); do
      echo; echo "# round $r of $ROUNDS: ragtime at $( [ "$which" = baseline ] && echo "$BASELINE (the baseline)" || echo "this tree"), $(uptime | sed 's/.*load/load/')"
      if [ "$which" = baseline ]; then load "$peer" "$peer_pid"; else load "$ragtime" "$ragtime_pid"; fi
      sleep 5 # the streams just stopped are cancelled after their resume grace (2 × retry)
    done
  done
else
  load "$ragtime" "$ragtime_pid"
fi
for log in "$work/ragtime.log" "$work/baseline.log"; do
  if [ -f "$log" ] && grep -qiE 'panic|fatal' "$log"; then
    echo "$(basename "$log"):" >&2; tail -20 "$log" >&2
  fi
done
