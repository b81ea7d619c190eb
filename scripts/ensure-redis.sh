#!/usr/bin/env bash
# Makes sure the Redis that tests use is reachable: starts the local
# redis-server when it is installed but down, the way the development and CI
# machines start it (loopback, nothing kept on disk). Prints one clear line
# and fails when it cannot.
set -euo pipefail
url=${1:-redis://127.0.0.1:6379/0}
hostport=$(echo "$url" | sed -E 's#^[a-z]+://([^@/]*@)?([^/?]*).*#\2#')
host=${hostport%%:*}; port=${hostport##*:}; [ "$port" = "$hostport" ] && port=6379

ready() { redis-cli -h "$host" -p "$port" ping 2>/dev/null | grep -q PONG || (exec 3<>"/dev/tcp/$host/$port") 2>/dev/null; }

if ready; then exit 0; fi
if command -v redis-server >/dev/null 2>&1 && { [ "$host" = 127.0.0.1 ] || [ "$host" = localhost ]; }; then
  echo "Redis at $host:$port is down; starting redis-server" >&2
  mkdir -p /var/lib/redis /var/log/redis 2>/dev/null || true
  redis-server --daemonize yes --bind 127.0.0.1 -::1 --port "$port" --save "" --appendonly no \
    --dir /var/lib/redis --logfile /var/log/redis/ci.log || true
  for _ in $(seq 1 30); do ready && exit 0; sleep 1; done
fi
echo "cannot reach Redis at $host:$port: install and start it (Debian: apt-get install redis-server && redis-server --daemonize yes) or set TEST_REDIS_URL" >&2
exit 1
