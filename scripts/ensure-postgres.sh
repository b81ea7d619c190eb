#!/usr/bin/env bash
# Makes sure the PostgreSQL that tests use is reachable: starts the local
# Debian cluster when it is installed but down. Prints one clear line and
# fails when it cannot.
set -euo pipefail
url=${1:-postgres://postgres@127.0.0.1:5432/ragtime_test?sslmode=disable}
hostport=$(echo "$url" | sed -E 's#^[a-z]+://([^@/]*@)?([^/?]*).*#\2#')
host=${hostport%%:*}; port=${hostport##*:}; [ "$port" = "$hostport" ] && port=5432

ready() { pg_isready -q -h "$host" -p "$port" 2>/dev/null || (exec 3<>"/dev/tcp/$host/$port") 2>/dev/null; }

if ready; then exit 0; fi
if command -v pg_ctlcluster >/dev/null 2>&1 && [ -d /etc/postgresql ]; then
  for v in $(ls /etc/postgresql); do
    echo "PostgreSQL at $host:$port is down; starting cluster $v/main" >&2
    pg_ctlcluster --skip-systemctl-redirect "$v" main start || true
  done
  for _ in $(seq 1 30); do ready && exit 0; sleep 1; done
fi
echo "cannot reach PostgreSQL at $host:$port: install and start it (Debian: apt-get install postgresql && pg_ctlcluster <version> main start) or set TEST_DATABASE_URL" >&2
exit 1
