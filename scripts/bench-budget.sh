#!/usr/bin/env bash
# Measures what issue 33 took off the critical path, on loopback, against
# llmsim closing its connection after every stream (as llama-server does)
# and embedding with a 2 ms delay:
#   1. a repeated question: the embed stage's p50 (query-embedding cache);
#   2. llm_connect's p50 after the first ask (the model connection dialled
#      while retrieval runs);
#   3. with ttft_budget_ms on varied questions and top_k, the prefill model's
#      median relative error (budget_outcomes.prefill_rel_error_p50) and how
#      often budgets held;
#   4. fixed top_k 4 against a budget B (1.2 × fixed top_k 4's p95 TTFT,
#      measured first) on the same questions, while llmsim's prefill cost
#      doubles halfway (llmsim restarted with doubled --prefill-ms and
#      --prefill-ms-per-token): p95 TTFT of each, in each half.
# Bounded: N asks per part (default 60), one at a time. Needs a local
# PostgreSQL (DATABASE_URL's server; a throw-away database is made), curl
# and python3. Usage: scripts/bench-budget.sh; QUANTILE=0.5 predicts at the
# model's median (serve's --ttft-budget-quantile; default 0.9), so part 3's
# error is the point prediction's, not a p90 margin's.
set -euo pipefail
cd "$(dirname "$0")/.."
n=${N:-60}
source scripts/budget-setup.sh bench_budget
sim_port=$(port)
"$bin" llmsim --addr "127.0.0.1:$sim_port" --close-after-stream --embed-ms 2 \
  --prefill-ms 15 --prefill-ms-per-token 0.08 --itl-ms 1 --output-tokens 8 >"$work/sim.log" 2>&1 &
pids+=($!)
sim=http://127.0.0.1:$sim_port/v1
for _ in $(seq 100); do curl -sf "$sim/models" >/dev/null && break; sleep 0.1; done
emb=(--embedder openai --embed-base-url "$sim" --embed-model sim-embed --embed-dimensions 256)
DATABASE_URL=$db "$bin" ingest --data-dir "$work/data" "${emb[@]}" cmd/ragtime/testdata/corpus docs >/dev/null
api_port=$(port)
DATABASE_URL=$db "$bin" serve --addr "127.0.0.1:$api_port" --data-dir "$work/data" "${emb[@]}" \
  --llm-provider openai --llm-base-url "$sim" --llm-model sim-7b --rate 0 --prefill-model-refresh 1s \
  --ttft-budget-quantile "${QUANTILE:-0.9}" >"$work/serve.log" 2>&1 &
pids+=($!)
api=http://127.0.0.1:$api_port
for _ in $(seq 200); do curl -sf "$api/healthz" >/dev/null && break; sleep 0.1; done

askq() { curl -sfN "$api/ask?$1" >/dev/null; }
enc() { python3 -c 'import sys,urllib.parse;print(urllib.parse.quote(sys.argv[1]))' "$1"; }
# 1 and 2: the same question, N times
q=$(enc "How does prefill time grow with prompt tokens?")
for _ in $(seq "$n"); do askq "q=$q&top_k=4&max_tokens=8"; done
# 3: varied questions and top_k, first to fit the model, then with budgets;
# each with a nonce after the system prompt (as a sweep sends), so the
# server's prefix cache holds the system prompt and not the contexts these
# questions share (a cached context is not predicted: see docs/ttft.md)
words=(prefill decode cache connection network queue tokens prompt latency retrieval)
for i in $(seq "$n"); do
  askq "q=$(enc "what about ${words[i % 10]} and ${words[(i * 7) % 10]} $i?")&top_k=$((1 + i % 12))&rerank_top_n=0&max_tokens=8&prompt_nonce=fit-$i-$$"
done
sleep 2 # the replica's model refresh
for i in $(seq "$n"); do
  askq "q=$(enc "tell me of ${words[i % 10]} then ${words[(i * 3) % 10]} $i")&top_k=12&rerank_top_n=0&max_tokens=8&ttft_budget_ms=$((40 + (i % 4) * 20))&prompt_nonce=budget-$i-$$"
done
# 4: fixed top_k against a budget, while the prefill cost doubles
ttfts() { # ttfts TAG: p95 ttft_ms of the asks whose question starts with TAG
  sleep 1
  psql "$db" -qAt -c "SELECT round((percentile_cont(0.95) WITHIN GROUP (ORDER BY ttft_ms))::numeric, 1) FROM queries WHERE question LIKE '$1%'"
}
for i in $(seq 20); do askq "q=$(enc "calib ${words[i % 10]} ${words[(i * 3) % 10]} $i")&top_k=4&rerank_top_n=0&max_tokens=8"; done
budget=$(python3 -c "import math,sys;print(math.ceil(1.2*float(sys.argv[1])))" "$(ttfts calib)")
half() { # half PHASE
  for i in $(seq "$n"); do
    local w="${words[i % 10]} and ${words[(i * 7) % 10]} $i"
    askq "q=$(enc "$1-fixed $w")&top_k=4&rerank_top_n=0&max_tokens=8"
    askq "q=$(enc "$1-budget $w")&top_k=12&rerank_top_n=0&max_tokens=8&ttft_budget_ms=$budget"
  done
}
half A
kill "${pids[0]}"; wait "${pids[0]}" 2>/dev/null || true
"$bin" llmsim --addr "127.0.0.1:$sim_port" --close-after-stream --embed-ms 2 \
  --prefill-ms 30 --prefill-ms-per-token 0.16 --itl-ms 1 --output-tokens 8 >>"$work/sim.log" 2>&1 &
pids[0]=$!
for _ in $(seq 100); do curl -sf "$sim/models" >/dev/null && break; sleep 0.1; done
half B
echo "shift: budget $budget ms; p95 ttft_ms: fixed top_k 4 before $(ttfts A-fixed), after $(ttfts B-fixed);" \
  "budget before $(ttfts A-budget), after $(ttfts B-budget)"
psql "$db" -qAt -F ' ' -c "SELECT 'shift: chunks sent under the budget (mean), before', round(avg(CASE WHEN question LIKE 'A-%' THEN (s.attrs->>'chunks')::int END), 2),
  'after', round(avg(CASE WHEN question LIKE 'B-%' THEN (s.attrs->>'chunks')::int END), 2)
  FROM queries q JOIN query_stages s ON s.query_id = q.id AND s.name = 'assemble' WHERE question LIKE '_-budget%'"
sleep 1 # the recorder's flush
psql "$db" -qAt -F ' ' <<'SQL'
WITH rep AS (SELECT id FROM queries WHERE question = 'How does prefill time grow with prompt tokens?' ORDER BY created_at OFFSET 1)
SELECT 'embed (repeated question, after the first): n', count(*), 'p50_ms', round((percentile_cont(0.5) WITHIN GROUP (ORDER BY duration_ms))::numeric, 4),
       'hits', count(*) FILTER (WHERE attrs->>'cache' = 'hit')
FROM query_stages WHERE name = 'embed' AND query_id IN (SELECT id FROM rep);
WITH later AS (SELECT id FROM queries ORDER BY created_at OFFSET 1)
SELECT 'llm_connect (after the first ask): n', count(*), 'p50_ms', round((percentile_cont(0.5) WITHIN GROUP (ORDER BY duration_ms))::numeric, 4),
       'p95_ms', round((percentile_cont(0.95) WITHIN GROUP (ORDER BY duration_ms))::numeric, 4),
       'prewarmed', count(*) FILTER (WHERE attrs->>'prewarmed' = 'true')
FROM query_stages WHERE name = 'llm_connect' AND query_id IN (SELECT id FROM later);
SELECT 'prefill prediction (part 3, before the change; at --ttft-budget-quantile): n', count(*), 'median |measured - predicted| / measured',
       round((percentile_cont(0.5) WITHIN GROUP (ORDER BY abs(llm_prefill_ms - predicted_prefill_ms) / llm_prefill_ms))::numeric, 3)
FROM queries WHERE question LIKE 'tell me of%' AND predicted_prefill_ms IS NOT NULL;
SELECT 'budget (parts 3 and 4): queries', sum(queries), 'held', sum(held), 'missed', sum(missed), 'unmodelled', sum(unmodelled),
       'prefill_rel_error_p50', round(max(prefill_rel_error_p50)::numeric, 3), 'dropped_avg', max(dropped_avg)
FROM budget_outcomes;
SELECT 'prefill_model:', samples, 'intercept_ms', intercept_ms, 'ms_per_token', round(ms_per_token::numeric, 4), 'ratio_p90', round(ratio_p90::numeric, 3) FROM prefill_model;
SQL
