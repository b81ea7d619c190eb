#!/usr/bin/env bash
# Installs PostgreSQL 15's HTML documentation (Debian package
# postgresql-doc-15) when it is missing and prints its folder. The benchmarks
# over it (bench-ingest-pgdocs.sh, bench-retrieval.sh) share this step; the
# pages never enter the repository.
set -euo pipefail
docs=/usr/share/doc/postgresql-doc-15/html
if [ ! -d "$docs" ]; then
	"$(dirname "$0")/apt-install.sh" "the corpus of the PostgreSQL-manual benchmarks" postgresql-doc-15 >&2
fi
echo "$docs"
