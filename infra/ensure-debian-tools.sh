#!/usr/bin/env bash
# Make sure the Debian packages the stack and the tests run are installed, each named as
# BINARY=PACKAGE: bubblewrap (bwrap) — replay workers run every replay step in it and refuse to
# start without it (rule 16); prometheus — the alert-rule test runs infra/prometheus-rules.yml
# in a real Prometheus; chromium — the web console's browser tests (tests/api/ui/) drive it
# headless. Idempotent: does nothing when every binary is on PATH.
set -euo pipefail
missing=()
for pair in "$@"; do
  command -v "${pair%%=*}" >/dev/null 2>&1 || missing+=("${pair#*=}")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if ! command -v apt-get >/dev/null 2>&1; then
  echo "missing packages and no apt-get to install them: ${missing[*]}" >&2
  exit 1
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
for pair in "$@"; do
  command -v "${pair%%=*}" >/dev/null || { echo "${pair#*=} did not install ${pair%%=*}" >&2; exit 1; }
done
