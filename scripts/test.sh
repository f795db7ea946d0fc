#!/usr/bin/env bash
# The README's second command: install everything the tests need, then run them, tier by tier.
#
#   bash scripts/test.sh           what CI runs (.ci/run): Debian tools, the test venv, the cached
#                                  real engines, ruff/mypy, then the unit, stack and real tiers
#   bash scripts/test.sh --quick   the venv only (no Debian packages, no engines), ruff/mypy, then
#                                  the unit tier on every core: minutes, for every edit
#
# The tiers (tests/support/tiers.py says which test is where and why):
#   unit   in-process only, run on every core (pytest-xdist)
#   stack  the simulator, serve and the tools as child processes; promtool/amtool/helm/compose
#   real   the CPU vLLM, llama.cpp, Prometheus and Alertmanager servers, Chromium, pip installs
# Each tier prints its time; the run ends with each tier's total and the 30 slowest tests, and
# fails when a unit test took over 2 s or a stack test over 90 s (tests/support/durations.py;
# --quick lists such tests without failing: it runs on machines doing other work).
# Runs as root on a fresh Debian 12 machine: Debian prometheus (promtool), prometheus-alertmanager
# (amtool), chromium, docker-compose; the CPU build of vLLM, a llama.cpp server and tiny models are
# cached under ${LLM_EXPORTER_CACHE:-/var/cache/llm-layer-exporter}.
# Extra arguments go to every tier's pytest, e.g. `bash scripts/test.sh -k kv_cache`.
set -euo pipefail
cd "$(dirname "$0")/.."
quick=0
if [ "${1:-}" = "--quick" ]; then
  quick=1
  shift
fi
as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

missing=()
[ "$quick" = 1 ] || {
command -v promtool >/dev/null || missing+=(prometheus)
command -v amtool >/dev/null || missing+=(prometheus-alertmanager)
command -v chromium >/dev/null || missing+=(chromium)
command -v docker-compose >/dev/null || missing+=(docker-compose)
if [ "${#missing[@]}" -gt 0 ]; then
  echo "installing Debian packages: ${missing[*]}" >&2
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
}

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

# Real engines for the real tier, cached between runs (created when missing:
# about 2-4 min for vLLM, 8-28 min for the llama.cpp server build on 2 cores).
if [ "$quick" = 0 ] && [ "${LLM_EXPORTER_SKIP_VLLM:-0}" != "1" ]; then
  bash scripts/integration/setup_vllm.sh
fi
if [ "$quick" = 0 ] && [ "${LLM_EXPORTER_SKIP_LLAMACPP:-0}" != "1" ]; then
  bash scripts/integration/setup_llamacpp.sh
fi

# The test extras' console scripts (hadolint, check-jsonschema, kubernetes-validate) live in
# .venv/bin: put it first on PATH so a bare environment finds them as the tests do.
export PATH="$PWD/.venv/bin:$PATH"

RESULTS="${LLM_EXPORTER_TEST_RESULTS:-$(mktemp -d)}"
mkdir -p "$RESULTS"
failed=()
extra=$#
# the full run fails on a test over its tier's budget; --quick lists such tests without failing
budget="--duration-budget"
[ "$quick" = 0 ] || budget=""
# run_tier NAME MARK-EXPRESSION PYTEST-ARGS...: one tier, timed; its durations to $RESULTS/NAME.json
run_tier() {
  local name="$1" expr="$2" t0=$SECONDS rc
  shift 2
  echo "=== tier $name ===" >&2
  set +e
  .venv/bin/python -m pytest -q -p no:cacheprovider -m "$expr" ${budget:+"$budget"} \
    "--durations-file=$RESULTS/$name.json" "$@"
  rc=$?
  set -e
  echo "=== tier $name: exit $rc in $((SECONDS - t0)) s ===" >&2
  if [ "$rc" -eq 5 ] && [ "$extra" -gt 0 ]; then
    rc=0 # extra arguments (-k, a path) may select nothing in a tier
  elif [ "$rc" -eq 5 ]; then
    echo "scripts/test.sh: tier $name collected no tests" >&2
    rc=1
  fi
  [ "$rc" -eq 0 ] || failed+=("$name")
}

# -n: pytest-xdist. The unit tier is in-process, so its tests share nothing: one worker per core.
# The stack tier's tests mostly wait on their children (a simulator paced in model time, a serve
# scraping every second: about 60 % of two cores busy with one test per core), so it runs one and
# a half workers per core, at most 4: each worker hands out its own ports (tests/support/ports.py)
# and temporary folders, and no test reads the host's speed, so a neighbour's load changes how long
# a test takes, not what it finds. The scenario stacks (a simulator, serve and a load generator
# each, about 1.5 cores busy) run one after another on one worker (--dist loadgroup,
# tests/support/tiers.py SCENARIO_STACK_PATHS): three at once starve one another and change the
# scenario itself. The real tier runs in one process: its engines take every core.
# Hypothesis builds its Unicode tables (.hypothesis/unicode_data, not in git) the first time a text
# strategy draws: 1.3-3.6 s on a fresh clone, charged to whichever unit test draws first and over the
# unit budget. Built here, once, before any test is timed (0.14 s for that test once they exist);
# inside pytest's start-up Hypothesis warns about exactly this, so it happens out here.
.venv/bin/python -c 'from hypothesis.internal.charmap import charmap, intervals_from_codec
charmap(); intervals_from_codec("utf-8")' 2>/dev/null || true
run_tier unit "not stack and not real" -n "$(nproc)" "$@"
if [ "$quick" = 0 ]; then
  stack_workers=$(($(nproc) * 3 / 2))
  [ "$stack_workers" -ge 1 ] || stack_workers=1
  [ "$stack_workers" -le 4 ] || stack_workers=4
  run_tier stack "stack" -n "$stack_workers" --dist loadgroup "$@"
  run_tier real "real" "$@"
fi
.venv/bin/python -m tests.support.durations "$RESULTS"/*.json
if [ "${#failed[@]}" -gt 0 ]; then
  echo "scripts/test.sh: failed tier(s): ${failed[*]}" >&2
  exit 1
fi
