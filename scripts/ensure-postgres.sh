#!/usr/bin/env bash
# Makes sure the PostgreSQL that tests use is reachable: starts the local
# Debian cluster configured for that port when it is installed but down.
# When a PostgreSQL answers on another local port, it says so first (the
# URL's port is then the likely mistake). Says what it does and what it
# waits for; fails with one clear line when it cannot.
set -euo pipefail
url=${1:-postgres://postgres@127.0.0.1:5432/ragtime_test?sslmode=disable}
hostport=$(echo "$url" | sed -E 's#^[a-z]+://([^@/]*@)?([^/?]*).*#\2#')
host=${hostport%%:*}; port=${hostport##*:}; [ "$port" = "$hostport" ] && port=5432
wait_s=${RAGTIME_PG_START_WAIT:-30}

ready() { pg_isready -q -h "$host" -p "$port" 2>/dev/null || (exec 3<>"/dev/tcp/$host/$port") 2>/dev/null; }

# other_ports lists the local ports other than $port where a PostgreSQL
# answers: Debian's clusters that are online, else the sockets in the usual
# socket directories that pg_isready gets an answer from.
other_ports() {
  {
    if command -v pg_lsclusters >/dev/null 2>&1; then
      pg_lsclusters -h 2>/dev/null | awk '$4 ~ /^online/ {print $3}'
    fi
    for s in /var/run/postgresql/.s.PGSQL.* /tmp/.s.PGSQL.*; do
      [ -S "$s" ] || continue
      p=${s##*.}
      if pg_isready -q -h "$(dirname "$s")" -p "$p" 2>/dev/null; then echo "$p"; fi
    done
    true
  } | { grep -vx "$port" || true; } | sort -nu | paste -sd ' ' -
}

if ready; then exit 0; fi
local_host=false
case "$host" in 127.*|localhost|::1|/*) local_host=true ;; esac

echo "ensure-postgres: nothing answers at $host:$port (from TEST_DATABASE_URL); looking for a local cluster" >&2
if $local_host; then
  others=$(other_ports)
  # A cluster configured for this port that is down: start it.
  down=""
  if command -v pg_lsclusters >/dev/null 2>&1; then
    down=$(pg_lsclusters -h 2>/dev/null | awk -v p="$port" '$3 == p && $4 !~ /^online/ {print $1 " " $2}' | head -1)
  fi
  if [ -n "$down" ]; then
    set -- $down
    echo "ensure-postgres: starting cluster $1/$2 (port $port) with pg_ctlcluster; then waiting up to ${wait_s}s for it to answer" >&2
    pg_ctlcluster --skip-systemctl-redirect "$1" "$2" start || true
    for i in $(seq 1 "$wait_s"); do
      if ready; then echo "ensure-postgres: PostgreSQL answers at $host:$port after ${i}s" >&2; exit 0; fi
      sleep 1
    done
    echo "ensure-postgres: cluster $1/$2 did not answer at $host:$port within ${wait_s}s; see its log with: pg_lsclusters; tail /var/log/postgresql/postgresql-$1-$2.log" >&2
    exit 1
  fi
  if [ -n "$others" ]; then
    first=${others%% *}
    echo "ensure-postgres: a PostgreSQL answers on port $others of this machine, TEST_DATABASE_URL says $port: put port $first in TEST_DATABASE_URL (make test TEST_DATABASE_URL=postgres://…:$first/ragtime_test), or start the server meant for port $port" >&2
    exit 1
  fi
fi
echo "ensure-postgres: cannot reach PostgreSQL at $host:$port: install and start it (Debian: apt-get install postgresql && pg_ctlcluster <version> main start) or set TEST_DATABASE_URL" >&2
exit 1
