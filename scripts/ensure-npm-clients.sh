#!/usr/bin/env bash
# Installs the npm packages of a test's client folder (default: the
# OpenAI-compatible clients of cmd/ragtime TestOpenAIClients) exactly as its
# package-lock.json pins them: `npm ci` when node_modules does not hold that
# lock yet, nothing otherwise (the copy of the lock in node_modules marks a
# finished install). Run by `make test` and by the test itself; concurrent
# runs wait for each other. Needs Node ≥ 20 with npm and the npm registry.
set -euo pipefail
dir="${1:-$(dirname "$0")/../cmd/ragtime/testdata/openai-clients}"
cd "$dir"
command -v npm >/dev/null 2>&1 || { echo "npm is missing: install Node.js ≥ 20 with npm (apt-get install nodejs npm)" >&2; exit 1; }
wait_s=${NPM_LOCK_WAIT:-600}
exec 9>.install.lock
if ! flock -n 9; then
  echo "ensure-npm-clients: waiting for another install of $(pwd) to finish (lock .install.lock; at most ${wait_s}s)" >&2
  flock -w "$wait_s" 9 || { echo "ensure-npm-clients: the other install of $(pwd) still holds .install.lock after ${wait_s}s; stop it or raise NPM_LOCK_WAIT" >&2; exit 1; }
fi
if cmp -s package-lock.json node_modules/.ragtime-lock 2>/dev/null; then exit 0; fi
echo "ensure-npm-clients: installing the npm clients of $(pwd) with npm ci, as package-lock.json pins them (a minute or two on a fresh machine)" >&2
t0=$(date +%s)
npm ci --no-audit --no-fund --loglevel=error >&2
cp package-lock.json node_modules/.ragtime-lock
echo "ensure-npm-clients: installed in $(($(date +%s) - t0))s" >&2
