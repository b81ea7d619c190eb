#!/usr/bin/env bash
# Retrieval quality and latency on a labelled set over a public manual:
# installs PostgreSQL 15's HTML documentation when missing
# (scripts/ensure-pgdocs.sh), ingests it with the embedded defaults into a
# throw-away data dir, serves it on 127.0.0.1 (a free port, --rate 0) and
# runs `ragtime eval` over bench/retrieval/pgdocs-qrels.jsonl for vector,
# lexical and hybrid retrieval, each without and with the reranker.
#
# Environment: DATABASE_URL (serve records every search there; default the
# local ragtime database), QRELS, TOP_K (10), RUNS (1), EVAL_FLAGS (more
# eval flags, e.g. "--vector-k 50 --lexical-k 50 --json"), INGEST_FLAGS,
# SERVE_FLAGS. Every step is bounded by a timeout.
set -euo pipefail
cd "$(dirname "$0")/.."
docs=$(scripts/ensure-pgdocs.sh)
: "${DATABASE_URL:=postgres://postgres@127.0.0.1:5432/ragtime?sslmode=disable}"
qrels=${QRELS:-bench/retrieval/pgdocs-qrels.jsonl}
work=$(mktemp -d)
serve_pid=
cleanup() {
	if [ -n "$serve_pid" ]; then
		kill "$serve_pid" 2>/dev/null || true
		wait "$serve_pid" 2>/dev/null || true
	fi
	rm -rf "$work"
}
trap cleanup EXIT
echo "building ragtime..." >&2
go build -o "$work/ragtime" ./cmd/ragtime
echo "ingesting $docs ..." >&2
# shellcheck disable=SC2086
timeout 600 "$work/ragtime" ingest --data-dir "$work/data" ${INGEST_FLAGS:-} "$docs" >&2
timeout 60 "$work/ragtime" migrate --database-url "$DATABASE_URL" >/dev/null
# shellcheck disable=SC2086
"$work/ragtime" serve --database-url "$DATABASE_URL" --data-dir "$work/data" --addr 127.0.0.1:0 --rate 0 \
	--reload-interval 0 ${SERVE_FLAGS:-} >"$work/serve.out" 2>"$work/serve.err" &
serve_pid=$!
url=
for _ in $(seq 1 300); do
	url=$(grep -o 'serving on http://127\.0\.0\.1:[0-9]*' "$work/serve.out" | cut -d' ' -f3 || true)
	[ -n "$url" ] && break
	kill -0 "$serve_pid" 2>/dev/null || { cat "$work/serve.err" >&2; exit 1; }
	sleep 0.1
done
[ -n "$url" ] || { echo "serve did not start within 30 s" >&2; cat "$work/serve.err" >&2; exit 1; }
head -1 "$work/serve.out" >&2
echo "$(date -u +%Y-%m-%dT%H:%MZ) ragtime eval --qrels $qrels --retrieval vector,lexical,hybrid --rerank off,on --top-k ${TOP_K:-10} --runs ${RUNS:-1} ${EVAL_FLAGS:-}"
# shellcheck disable=SC2086
timeout 900 "$work/ragtime" eval --qrels "$qrels" --url "$url" --retrieval vector,lexical,hybrid --rerank off,on \
	--top-k "${TOP_K:-10}" --runs "${RUNS:-1}" ${EVAL_FLAGS:-}
