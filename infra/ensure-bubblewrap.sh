#!/usr/bin/env bash
# Make sure bubblewrap (bwrap) is installed: replay workers run every replay step in it and
# refuse to start without it (rule 16). Idempotent: does nothing when bwrap is on PATH.
set -euo pipefail
if command -v bwrap >/dev/null 2>&1; then exit 0; fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "bubblewrap is missing and apt-get is not available: install the 'bubblewrap' package" >&2
  exit 1
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq bubblewrap
command -v bwrap >/dev/null || { echo "bubblewrap did not install bwrap" >&2; exit 1; }
