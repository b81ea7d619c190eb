#!/usr/bin/env bash
# Measures what concurrent document uploads cost a running serve in memory:
# starts `ragtime serve` on loopback with the embedded defaults and a scratch
# database, reads its VmRSS, sends N concurrent multipart uploads of one
# SIZE-byte text file each (distinct ids), and prints VmRSS and VmHWM (peak)
# after. Bounded: one round of N requests, each with a 900 s timeout.
# Usage: scripts/ingest-rss.sh [N=6] [SIZE=9900000] [serve flags...]
# RAGTIME_BIN=path measures another build (e.g. an older commit's).
set -euo pipefail
n=${1:-6}
size=${2:-9900000}
shift $(( $# > 2 ? 2 : $# ))
cd "$(dirname "$0")/.."
bin=${RAGTIME_BIN:-bin/ragtime}
[ -n "${RAGTIME_BIN:-}" ] || go build -o bin/ragtime ./cmd/ragtime
db=ragtime_ingest_rss
base=${PGURL:-postgres://postgres@127.0.0.1:5432}
psql "$base/postgres" -qc "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db" >/dev/null
work=$(mktemp -d)
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; rm -rf "$work"; psql "$base/postgres" -qc "DROP DATABASE IF EXISTS $db" >/dev/null || true; }
trap cleanup EXIT
"$bin" migrate --database-url "$base/$db?sslmode=disable" >/dev/null
# Sentences of varied words, so chunks and vectors are realistic.
python3 - "$size" "$work/doc.txt" <<'PY'
import random, sys
size, path = int(sys.argv[1]), sys.argv[2]
random.seed(1)
words = "prefill decode token cache latency queue batch model prompt context chunk vector index search rerank answer stream network connection server client request first time window budget".split()
out, n = [], 0
while n < size:
    s = " ".join(random.choice(words) for _ in range(random.randint(6, 18))).capitalize() + ". "
    if random.random() < 0.1: s += "\n\n"
    out.append(s); n += len(s)
open(path, "w").write("".join(out)[:size])
PY
"$bin" serve --addr 127.0.0.1:0 --database-url "$base/$db?sslmode=disable" --data-dir "$work/data" "$@" >"$work/out" 2>"$work/err" &
pid=$!
for _ in $(seq 100); do grep -q 'serving on' "$work/out" 2>/dev/null && break; sleep 0.1; done
url=$(grep -o 'http://[0-9.:]*' "$work/out" | head -1)
[ -n "$url" ] || { cat "$work/err"; exit 1; }
rss() { awk -v k="$1:" '$1==k {printf "%d", $2/1024}' "/proc/$pid/status"; }
sleep 1
echo "before: VmRSS $(rss VmRSS) MB, VmHWM $(rss VmHWM) MB"
start=$(date +%s.%N)
for i in $(seq "$n"); do
	cp "$work/doc.txt" "$work/doc$i.txt"
	curl -s -o "$work/resp$i" -w "%{http_code}\n" --max-time 900 -F "file=@$work/doc$i.txt" "$url/v1/documents" >"$work/code$i" &
done
wait $(jobs -p | grep -v "^$pid$") 2>/dev/null || true
end=$(date +%s.%N)
echo "after $n concurrent uploads of $size bytes: VmRSS $(rss VmRSS) MB, VmHWM (peak) $(rss VmHWM) MB, $(echo "$end - $start" | bc) s"
echo "status codes: $(cat "$work"/code* | sort | uniq -c | tr -s ' \n' ' ')"
