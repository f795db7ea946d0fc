#!/usr/bin/env bash
# Create .venv with the exporter installed (and, with --test, the test tools).
# Works on a fresh Debian 12 machine: installs python3-venv when the stdlib venv
# or ensurepip is missing (needs root or sudo for that step only).
set -euo pipefail
cd "$(dirname "$0")/.."
extras=""
[ "${1:-}" = "--test" ] && extras="[test]"

as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

if ! python3 -c 'import venv, ensurepip' 2>/dev/null; then
  as_root apt-get update -qq
  as_root apt-get install -y -qq python3-venv python3-pip >/dev/null
fi
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
.venv/bin/python -m pip install -q -e ".${extras}"
