#!/usr/bin/env bash
# The worked example of docs/tuning.md: `ragtime sweep --ttft-budgets`
# compares fixed top_k with a TTFT budget on the labelled sweep questions
# (cmd/ragtime/testdata/sweep) while llmsim's prefill cost doubles halfway.
#   1. a calibration sweep (fixed top_k 1..32, no change of load) fits the
#      prefill model and picks the best fixed top_k (the recommendation); B
#      is 1.1 × its TTFT p95, rounded up to 5 ms (so it meets B before the
#      change);
#   2. llmsim restarts with --prefill-shift-after set to the middle of the
#      second sweep, which asks the same top_k and B (at the largest top_k)
#      on the same questions, in one shuffled schedule; its table gives
#      TTFT p95 and recall@k of each setting in each half.
# Bounded: RUNS (default 14) runs of 6 questions per setting. Needs a local
# PostgreSQL (DATABASE_URL's server; a throw-away database is made), curl
# and python3. Usage: scripts/sweep-budget.sh (QUANTILE sets serve's
# --ttft-budget-quantile, default 0.9). It ends with the prefill model's
# error on the budget's queries of the first half (predicted_prefill_ms
# against llm_prefill_ms).
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${RUNS:-14}
source scripts/budget-setup.sh sweep_budget
sim_port=$(port)
sim=http://127.0.0.1:$sim_port/v1
start_sim() { # start_sim [FLAGS]: llmsim at its default costs, 8 output tokens
  "$bin" llmsim --addr "127.0.0.1:$sim_port" --output-tokens 8 --itl-ms 1 "$@" >>"$work/sim.log" 2>&1 &
  pids[0]=$!
  for _ in $(seq 100); do curl -sf "$sim/models" >/dev/null && break; sleep 0.1; done
}
start_sim
DATABASE_URL=$db "$bin" ingest --data-dir "$work/data" --chunk-size 300 --chunk-overlap 0 cmd/ragtime/testdata/sweep/corpus >/dev/null
api_port=$(port)
DATABASE_URL=$db "$bin" serve --addr "127.0.0.1:$api_port" --data-dir "$work/data" \
  --llm-provider openai --llm-base-url "$sim" --llm-model llmsim --rate 0 --prefill-model-refresh 1s \
  --ttft-budget-quantile "${QUANTILE:-0.9}" >"$work/serve.log" 2>&1 &
pids+=($!)
api=http://127.0.0.1:$api_port
for _ in $(seq 200); do curl -sf "$api/healthz" >/dev/null && break; sleep 0.1; done

ks=1,2,4,8,16,32
sweep() { DATABASE_URL=$db "$bin" sweep --server "$api" --questions cmd/ragtime/testdata/sweep/questions.jsonl \
  --top-k "$ks" --rerank-top-n k --max-tokens 8 --seed 7 "$@"; }
sweep --runs 7 --out "$work/calib" >"$work/calib.txt"
read -r best budget < <(python3 - "$work/calib/sweep.json" <<'PY'
import json, math, sys
r = json.load(open(sys.argv[1]))
k = r["recommendation"]["setting"]["top_k"]
p95 = next(s["ttft_p95_ms"] for s in r["settings"] if s["top_k"] == k)
print(k, 5 * math.ceil(1.1 * p95 / 5))
PY
)
echo "calibration: best fixed top_k $best; B = $budget ms"
grep -E '^ *(top_k|[0-9]+ )' "$work/calib.txt" || true

# The second sweep: a check query, one warm-up per setting, then the
# schedule; the prefill cost doubles after its first half.
settings=$(( $(tr ',' '\n' <<<"$ks" | wc -l) + 1 ))
planned=$(( settings * 6 * runs ))
kill "${pids[0]}"; wait "${pids[0]}" 2>/dev/null || true
start_sim --prefill-shift-after $(( 1 + settings + planned / 2 )) --prefill-shift-factor 2
sweep --runs "$runs" --ttft-budgets "$budget" --out "$work/shift" | tee "$work/shift.txt"
echo "(llmsim --prefill-shift-after $(( 1 + settings + planned / 2 )): the prefill cost doubled after the first half of the $planned measured queries)"
id=$(python3 -c 'import json,sys;print(json.load(open(sys.argv[1]))["sweep_id"])' "$work/shift/sweep.json")
sleep 1 # the recorder's flush
psql "$db" -qAt -F ' ' -c "SELECT 'prefill prediction (the budget''s queries, first half; at --ttft-budget-quantile ${QUANTILE:-0.9}): n', count(*),
  'median |measured - predicted| / measured', round((percentile_cont(0.5) WITHIN GROUP (ORDER BY abs(llm_prefill_ms - predicted_prefill_ms) / llm_prefill_ms))::numeric, 3),
  'median (predicted - measured) / measured', round((percentile_cont(0.5) WITHIN GROUP (ORDER BY (predicted_prefill_ms - llm_prefill_ms) / llm_prefill_ms))::numeric, 3)
  FROM (SELECT *, row_number() OVER (ORDER BY created_at) AS n FROM queries WHERE sweep_id = '$id') q
  WHERE predicted_prefill_ms IS NOT NULL AND 2 * n <= (SELECT count(*) FROM queries WHERE sweep_id = '$id')"
