#!/usr/bin/env bash
# Ingests PostgreSQL 15's HTML documentation (Debian package postgresql-doc-15:
# 1,173 files, 18 MB) with the embedded defaults and prints the time, the
# chunk count and the index size. The package is installed when missing and
# never enters the repository. Usage: scripts/bench-ingest-pgdocs.sh [ingest flags...]
set -euo pipefail
cd "$(dirname "$0")/.."
docs=$(scripts/ensure-pgdocs.sh)
go build -o bin/ragtime ./cmd/ragtime
data=$(mktemp -d)
trap 'rm -rf "$data"' EXIT
echo "files: $(find "$docs" -name '*.html' | wc -l), $(du -sh "$docs" | cut -f1)"
start=$(date +%s.%N)
./bin/ragtime ingest --data-dir "$data" "$@" "$docs" 2>/dev/null
end=$(date +%s.%N)
echo "wall time (build excluded): $(echo "$end - $start" | bc) s"
echo "index files: $(du -sh "$data/index" | cut -f1) ($(ls "$data/index" | tr '\n' ' '))"
