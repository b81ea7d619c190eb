#!/usr/bin/env bash
# Installs PostgreSQL 15's HTML documentation (Debian package
# postgresql-doc-15) when it is missing and prints its folder. The benchmarks
# over it (bench-ingest-pgdocs.sh, bench-retrieval.sh) share this step; the
# pages never enter the repository.
set -euo pipefail
docs=/usr/share/doc/postgresql-doc-15/html
if [ ! -d "$docs" ]; then
	echo "installing postgresql-doc-15 (apt-get)..." >&2
	apt-get update -qq >&2
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql-doc-15 >/dev/null
fi
echo "$docs"
