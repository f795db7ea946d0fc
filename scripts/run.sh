#!/usr/bin/env bash
# The README's first command: install into .venv (with the tools extra, which the demo needs;
# scripts/bootstrap.sh), then run the main job.
#   - an inference server given (arguments, or LLM_EXPORTER_ENGINE / LLM_EXPORTER_CONFIG)
#     or an NVIDIA GPU present  -> `llm-layer-exporter serve "$@"` on :9750
#   - neither                   -> the built-in demo (simulated server + load + exporter
#                                  on 127.0.0.1, live view), so a newcomer sees it work
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
bin=.venv/bin/llm-layer-exporter
cat >&2 <<HINT
[run] installed: $PWD/$bin
[run] to use it from any shell:  source $PWD/.venv/bin/activate   (then: llm-layer-exporter --help)
HINT
if [ "$#" -gt 0 ] || [ -n "${LLM_EXPORTER_ENGINE:-}" ] || [ -n "${LLM_EXPORTER_CONFIG:-}" ]; then
  exec "$bin" serve "$@"
fi
if .venv/bin/python -c 'import pynvml; pynvml.nvmlInit()' 2>/dev/null; then
  echo "NVIDIA GPU found: serving GPU metrics on :9750 (add --engine URL for an inference server)" >&2
  exec "$bin" serve
fi
echo "No GPU and no inference server given: running the built-in demo (Ctrl-C to stop)" >&2
exec "$bin" demo
