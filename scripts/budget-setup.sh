# Sourced by scripts/bench-budget.sh and scripts/sweep-budget.sh: builds
# ragtime into a temporary directory ($bin), makes and migrates a throw-away
# database ($db, named ragtime_$1_PID on DATABASE_URL's server), and on exit
# stops the processes listed in $pids and drops the database (KEEP_DB=1
# keeps it). Defines port, which prints a free loopback port.
base_db=${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable}
db_name=ragtime_$1_$$
db=${base_db%/*}/$db_name?sslmode=disable
work=$(mktemp -d)
bin=$work/ragtime
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  [ -n "${KEEP_DB:-}" ] && echo "kept database $db_name" || psql "$base_db" -qc "DROP DATABASE IF EXISTS $db_name" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
go build -o "$bin" ./cmd/ragtime
psql "$base_db" -qc "CREATE DATABASE $db_name" >/dev/null
DATABASE_URL=$db "$bin" migrate >/dev/null

port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
