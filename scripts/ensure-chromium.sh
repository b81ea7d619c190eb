#!/usr/bin/env bash
# Makes sure headless Chromium is installed for the browser test
# (cmd/ragtime TestPagesInHeadlessChromium): installs Debian's chromium and
# chromium-driver when missing (scripts/apt-install.sh, which says what it
# waits for and bounds the wait for apt's lock). Fails with one clear line
# when it cannot.
set -euo pipefail
if command -v chromium >/dev/null 2>&1; then exit 0; fi
echo "ensure-chromium: chromium is missing; installing it for the browser test (a few minutes on a fresh machine)" >&2
"$(dirname "$0")/apt-install.sh" "the browser test needs a headless Chromium" chromium chromium-driver
command -v chromium >/dev/null 2>&1 || { echo "ensure-chromium: installing chromium failed: install Chromium and put it on PATH as 'chromium'" >&2; exit 1; }
