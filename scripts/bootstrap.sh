#!/usr/bin/env bash
# Create .venv with the exporter and its tools extra installed (demo, simulate, ramp, report:
# scripts/run.sh's demo needs them), and, with --test, the test extra (which includes the tools).
# Works on a fresh Debian 12 machine: installs python3-venv when the stdlib venv
# or ensurepip is missing (needs root or sudo for that step only).
# Prints one line per phase with its duration, so minutes of pip are not silent.
set -euo pipefail
cd "$(dirname "$0")/.."
extras="[tools]"
[ "${1:-}" = "--test" ] && extras="[test]"

as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }
phase() { echo "[bootstrap] $*" >&2; }
timed() {  # timed "what" command...
    local what="$1" t0=$SECONDS
    shift
    phase "$what ..."
    "$@"
    phase "$what: done in $((SECONDS - t0)) s"
}

if ! python3 -c 'import venv, ensurepip' 2>/dev/null; then
  timed "installing python3-venv (Debian)" bash -c 'as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }; as_root apt-get update -qq && as_root apt-get install -y -qq python3-venv python3-pip >/dev/null'
fi
if [ ! -x .venv/bin/python ]; then
  timed "creating .venv" python3 -m venv .venv
fi
timed "upgrading pip" .venv/bin/python -m pip install -q --upgrade pip
# pip's own progress (one line per package) instead of -q: the first install takes minutes
timed "installing llm-layer-exporter${extras} into .venv" \
  .venv/bin/python -m pip install --progress-bar off -e ".${extras}"
