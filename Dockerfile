# syntax=docker/dockerfile:1
#
# llm-layer-exporter image: `docker build -t llm-layer-exporter .`
#
# Stages:
#   builder  builds the project wheel and installs it (with its dependencies) into /opt/venv:
#            the runtime only (serve, diagnose, schema), or with EXTRAS=tools also the tools
#   runtime  the same slim Python base, /opt/venv copied in, no compilers, no pip cache,
#            numeric non-root user, the exporter as entrypoint
#
# Build arguments:
#   PYTHON_IMAGE        base of both stages (a specific tag, never `latest`)
#   EXTRAS              empty (default): the production image, the runtime only - no rich,
#                       httpx or matplotlib. `tools`: also demo, simulate, ramp, report (the
#                       `tools` extra of pyproject.toml), e.g. the compose demo's simulator:
#                       `docker build --build-arg EXTRAS=tools -t llm-layer-exporter:tools .`
#   DCGM_PACKAGE        empty (default): no DCGM; `--gpu-source auto` then uses NVML.
#                       `datacenter-gpu-manager-4-core`: installs DCGM 4 (Python bindings
#                       + libdcgm.so.4) from NVIDIA's CUDA apt repository for Debian 12,
#                       for `--gpu-source dcgm` / `dcgm:HOST:PORT` (standalone nv-hostengine).
#   DCGM_BINDINGS_PATH  where the DCGM Python bindings live; put on PYTHONPATH. Also the
#                       place to bind-mount the host's bindings into an image built without
#                       DCGM_PACKAGE (mount libdcgm.so.4 into /usr/lib/x86_64-linux-gnu too).
#   CUDA_REPO           NVIDIA's apt repository used only when DCGM_PACKAGE is set.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS builder
ARG EXTRAS=""
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
RUN python -m venv /opt/venv
COPY pyproject.toml README.md ./
COPY exporter ./exporter
# Build the project wheel first, then install it from the local wheel directory:
# the runtime stage gets an installed venv, never the source tree. EXTRAS=tools: wheel[tools].
RUN /opt/venv/bin/pip wheel --no-deps --wheel-dir /wheels . \
 && set -- /wheels/llm_layer_exporter-*.whl \
 && /opt/venv/bin/pip install "$1${EXTRAS:+[${EXTRAS}]}" \
 && /opt/venv/bin/pip uninstall -y pip \
 && /opt/venv/bin/llm-layer-exporter --version

FROM ${PYTHON_IMAGE} AS runtime
ARG DCGM_PACKAGE=""
ARG DCGM_BINDINGS_PATH=/usr/share/datacenter-gpu-manager-4/bindings/python3
ARG CUDA_REPO=https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64

# Optional DCGM: the keyring is fetched with the Python already in the image, so no curl,
# gnupg or compiler ever lands in this stage. DL3008: the package (and its version, as
# DCGM_PACKAGE=name=version) is the caller's choice through the build argument.
# hadolint ignore=DL3008
RUN if [ -n "${DCGM_PACKAGE}" ]; then \
      set -eux; \
      python -c 'import sys, urllib.request; urllib.request.urlretrieve(sys.argv[1], "/tmp/cuda-keyring.deb")' \
        "${CUDA_REPO}/cuda-keyring_1.1-1_all.deb"; \
      dpkg -i /tmp/cuda-keyring.deb; rm -f /tmp/cuda-keyring.deb; \
      apt-get update; \
      apt-get install -y --no-install-recommends "${DCGM_PACKAGE}"; \
      rm -rf /var/lib/apt/lists/*; \
      test -f "${DCGM_BINDINGS_PATH}/pydcgm.py"; \
    fi \
 && groupadd --system --gid 65532 exporter \
 && useradd --system --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin exporter

COPY --from=builder /opt/venv /opt/venv

ENV PATH=/opt/venv/bin:${PATH} \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PYTHONPATH=${DCGM_BINDINGS_PATH} \
    MPLCONFIGDIR=/tmp/matplotlib \
    NVIDIA_DRIVER_CAPABILITIES=utility \
    LLM_EXPORTER_HEALTHCHECK_URL=http://127.0.0.1:9750/healthz

USER 65532:65532
WORKDIR /tmp
EXPOSE 9750

# /healthz of `serve` on the default port. Containers that run another command of this
# image (simulate, ramp: an image built with EXTRAS=tools) or serve behind
# --web-config-file TLS override or disable it, or set LLM_EXPORTER_HEALTHCHECK_URL.
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=3 \
  CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen(os.environ['LLM_EXPORTER_HEALTHCHECK_URL'], timeout=4)"]

ENTRYPOINT ["llm-layer-exporter"]
CMD ["serve"]
