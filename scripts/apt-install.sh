#!/usr/bin/env bash
# Installs Debian packages for a setup step and says what it does and what
# it waits for: apt's lock, when another apt or dpkg holds it (a fresh
# machine's unattended upgrades do, for minutes), is waited on for at most
# APT_LOCK_WAIT seconds (default 300) with a line every 15 s naming the
# holder; then apt-get update and install run in the open, each bounded by
# the same lock timeout (DPkg::Lock::Timeout) should another apt start
# between. Fails with one clear line when it cannot.
# Usage: scripts/apt-install.sh WHY PACKAGE...
set -euo pipefail
why=$1
shift
wait_s=${APT_LOCK_WAIT:-300}
if ! command -v apt-get >/dev/null 2>&1; then
	echo "apt-install: $* missing ($why) and apt-get is not available: install them by hand" >&2
	exit 1
fi
sudo=""
if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
locks='/var/lib/dpkg/lock-frontend|/var/lib/dpkg/lock|/var/lib/apt/lists/lock|/var/cache/apt/archives/lock'

# holder prints "PID (COMMAND)" of a process holding one of apt's locks, or
# nothing.
holder() {
	if command -v lslocks >/dev/null 2>&1; then
		$sudo lslocks -n -o PID,COMMAND,PATH 2>/dev/null | awk -v re="^($locks)\$" '$3 ~ re {print $1 " (" $2 ")"; exit}'
	fi
}

waited=0
while h=$(holder) && [ -n "$h" ]; do
	if [ "$waited" -ge "$wait_s" ]; then
		echo "apt-install: apt's lock is still held by $h after ${wait_s}s; wait for it to finish (or raise APT_LOCK_WAIT) and run again" >&2
		exit 1
	fi
	if [ $((waited % 15)) -eq 0 ]; then
		echo "apt-install: waiting for apt's lock, held by $h (${waited}s of at most ${wait_s}s)" >&2
	fi
	sleep 1
	waited=$((waited + 1))
done

export DEBIAN_FRONTEND=noninteractive
lock=(-o "DPkg::Lock::Timeout=$((wait_s - waited > 30 ? wait_s - waited : 30))")
echo "apt-install: installing $* ($why): apt-get update, then apt-get install" >&2
t0=$(date +%s)
$sudo apt-get "${lock[@]}" update -q >&2
$sudo apt-get "${lock[@]}" install -y -q "$@" >&2
echo "apt-install: installed $* in $(($(date +%s) - t0))s" >&2
