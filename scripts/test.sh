#!/usr/bin/env bash
# The README's second command: install everything the tests need, then run them.
# Runs as root on a fresh Debian 12 machine (CI does exactly this via .ci/run):
#   - Debian: prometheus (promtool 2.42), prometheus-alertmanager (amtool 0.25),
#     chromium (page test), docker-compose 1.29 (compose file check)
#   - .venv with the exporter and its test extras
#   - ruff (lint, format) and mypy over every Python folder: a style failure stops before the
#     engines and pytest
#   - the CPU build of vLLM, a llama.cpp server build and tiny local models, cached under
#     ${LLM_EXPORTER_CACHE:-/var/cache/llm-layer-exporter} (created when missing)
# Extra arguments go to pytest, e.g. `bash scripts/test.sh -m "not integration"`.
set -euo pipefail
cd "$(dirname "$0")/.."
as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

missing=()
command -v promtool >/dev/null || missing+=(prometheus)
command -v amtool >/dev/null || missing+=(prometheus-alertmanager)
command -v chromium >/dev/null || missing+=(chromium)
command -v docker-compose >/dev/null || missing+=(docker-compose)
if [ "${#missing[@]}" -gt 0 ]; then
  echo "installing Debian packages: ${missing[*]}" >&2
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

bash scripts/bootstrap.sh --test

# Checked style before anything slow (pyproject.toml configures all three): ruff's lint rules,
# ruff's formatting (`ruff format .` fixes it) and mypy --strict over every Python folder
# (exporter/, alerts/, dashboards/, bench/, scripts/, tests/). The first failure stops the
# script: there is no point building engines or running pytest over it.
check_style() {  # check_style "what" command...
  local what="$1"
  shift
  if ! "$@"; then
    echo "scripts/test.sh: $what failed ($*); fix it before the tests run" >&2
    exit 1
  fi
}
check_style "lint" .venv/bin/ruff check .
check_style "format check" .venv/bin/ruff format --check .
check_style "type check" .venv/bin/mypy

# Real engines for the integration tests, cached between runs (created when missing:
# about 2-4 min for vLLM, 8-28 min for the llama.cpp server build on 2 cores).
if [ "${LLM_EXPORTER_SKIP_VLLM:-0}" != "1" ]; then
  bash scripts/integration/setup_vllm.sh
fi
if [ "${LLM_EXPORTER_SKIP_LLAMACPP:-0}" != "1" ]; then
  bash scripts/integration/setup_llamacpp.sh
fi

# The test extras' console scripts (hadolint, check-jsonschema, kubernetes-validate) live in
# .venv/bin: put it first on PATH so a bare environment finds them as the tests do.
export PATH="$PWD/.venv/bin:$PATH"

set +e
.venv/bin/python -m pytest -q -p no:cacheprovider --durations=30 "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
  echo "pytest collected no tests" >&2
  exit 1
fi
exit "$rc"
