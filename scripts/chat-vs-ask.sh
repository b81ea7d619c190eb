#!/usr/bin/env bash
# Compares /ask (GET, SSE) with /v1/chat/completions (streamed) on a running
# serve: N asks of each (default 100), alternating, one at a time, on
# loopback. Prints p50 and p90 of the server's own ttft_ms and e2e_ms (from
# the done event and the ragtime chunk) and of the client's wall time per
# ask (curl, connection included). Usage:
#   scripts/chat-vs-ask.sh [BASE_URL] [MODEL]   (http://127.0.0.1:8080, extractive)
# e.g. after `make run`, with N=200 for more runs. Needs curl and python3.
set -euo pipefail
base=${1:-http://127.0.0.1:8080}
model=${2:-extractive}
n=${N:-100}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for i in $(seq 1 "$n"); do
  q="What does a reused keep-alive connection skip $i?"
  qq=$(python3 -c 'import sys,urllib.parse;print(urllib.parse.quote(sys.argv[1]))' "$q")
  t0=$(date +%s%N)
  d=$(curl -sfN "$base/ask?q=$qq&max_tokens=64" | grep -A1 '^event: done' | tail -1 | sed 's/^data: //')
  t1=$(date +%s%N)
  echo "ask $(echo "$d" | python3 -c 'import sys,json;d=json.load(sys.stdin);print(d["ttft_ms"],d["e2e_ms"])') $(((t1 - t0) / 1000))" >>"$out"
  t0=$(date +%s%N)
  c=$(curl -sfN "$base/v1/chat/completions" -H 'Content-Type: application/json' \
    -d "{\"model\":\"$model\",\"stream\":true,\"max_tokens\":64,\"messages\":[{\"role\":\"user\",\"content\":\"$q\"}]}" |
    grep '"ragtime"' | sed 's/^data: //')
  t1=$(date +%s%N)
  echo "chat $(echo "$c" | python3 -c 'import sys,json;d=json.load(sys.stdin)["ragtime"];print(d["ttft_ms"],d["e2e_ms"])') $(((t1 - t0) / 1000))" >>"$out"
done
python3 - "$out" <<'PY'
import sys
rows = {}
for line in open(sys.argv[1]):
    k, t, e, w = line.split()
    rows.setdefault(k, []).append((float(t), float(e), int(w) / 1000))
for k, v in rows.items():
    for i, name in enumerate(["ttft_ms", "e2e_ms", "client_wall_ms"]):
        xs = sorted(x[i] for x in v)
        print(f"{k:5} {name:15} n {len(xs)}  p50 {xs[len(xs) // 2]:.3f}  p90 {xs[int(len(xs) * 0.9)]:.3f}")
PY
