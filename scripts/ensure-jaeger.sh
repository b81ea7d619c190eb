#!/usr/bin/env bash
# Makes sure the Jaeger v2 binary used by the tracing test (cmd/ragtime
# TestTracesInJaeger, docs/tracing.md) is built: builds
# github.com/jaegertracing/jaeger/cmd/jaeger at the version pinned in
# tools/jaeger/go.mod (a module of its own, so Jaeger never enters ragtime's
# go.mod) into a cache directory, once. Prints the binary's path on stdout.
#
#   RAGTIME_JAEGER_DIR  where the binary is cached
#                       (default: ${XDG_CACHE_HOME:-~/.cache}/ragtime/jaeger-<version>)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
version="$(awk '$1=="github.com/jaegertracing/jaeger"{print $2}' "$root/tools/jaeger/go.mod")"
[ -n "$version" ] || { echo "ensure-jaeger: no jaeger version in tools/jaeger/go.mod" >&2; exit 1; }
dir="${RAGTIME_JAEGER_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ragtime/jaeger-$version}"
bin="$dir/jaeger"
if [ -x "$bin" ]; then echo "$bin"; exit 0; fi
command -v go >/dev/null 2>&1 || { echo "ensure-jaeger: go is not on PATH" >&2; exit 1; }
mkdir -p "$dir"
# Several test runs (worktrees, CI jobs) may start at once on a cold cache:
# one builds while the others wait on the lock, then find the binary.
# The wait is bounded (RAGTIME_JAEGER_LOCK_WAIT seconds, default 1200: a cold
# build on 2 busy cores) and said, with the process that holds the lock.
wait_s=${RAGTIME_JAEGER_LOCK_WAIT:-1200}
exec 9>"$dir/.lock"
if ! flock -n 9; then
  holder=$(lslocks -n -o PID,COMMAND,PATH 2>/dev/null | awk -v p="$dir/.lock" '$3 == p {print " by " $1 " (" $2 ")"; exit}' || true)
  echo "ensure-jaeger: another process is building jaeger $version into $dir (lock held$holder); waiting for it, at most ${wait_s}s" >&2
  t0=$(date +%s)
  flock -w "$wait_s" 9 || { echo "ensure-jaeger: $dir/.lock is still held after ${wait_s}s; stop that build (or raise RAGTIME_JAEGER_LOCK_WAIT) and run again" >&2; exit 1; }
  echo "ensure-jaeger: the other build let go of the lock after $(($(date +%s) - t0))s" >&2
fi
if [ -x "$bin" ]; then echo "$bin"; exit 0; fi
echo "ensure-jaeger: building jaeger $version into $dir for the tracing test (downloads its modules and compiles them: minutes on 2 cores, once)" >&2
t0=$(date +%s)
(cd "$root/tools/jaeger" && GOWORK=off GOFLAGS=-buildvcs=false nice -n 10 \
  go build -trimpath -o "$bin.tmp" github.com/jaegertracing/jaeger/cmd/jaeger) >&2 ||
  { rm -f "$bin.tmp"; echo "ensure-jaeger: building github.com/jaegertracing/jaeger/cmd/jaeger@$version failed" >&2; exit 1; }
mv "$bin.tmp" "$bin"
echo "ensure-jaeger: built $bin in $(($(date +%s) - t0))s" >&2
echo "$bin"
