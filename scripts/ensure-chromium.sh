#!/usr/bin/env bash
# Makes sure headless Chromium is installed for the browser test
# (cmd/ragtime TestPagesInHeadlessChromium): installs Debian's chromium and
# chromium-driver when missing. Prints one clear line and fails when it
# cannot.
set -euo pipefail
if command -v chromium >/dev/null 2>&1; then exit 0; fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "chromium is missing and apt-get is not available: install Chromium and put it on PATH as 'chromium'" >&2
  exit 1
fi
sudo=""
if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
echo "installing chromium for the browser test (apt-get)" >&2
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq >/dev/null
$sudo apt-get install -y -qq chromium chromium-driver >/dev/null
command -v chromium >/dev/null 2>&1 || { echo "installing chromium failed" >&2; exit 1; }
