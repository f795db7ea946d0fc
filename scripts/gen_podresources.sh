#!/usr/bin/env bash
# Regenerate the kubelet PodResources stubs (exporter/kubernetes/kubelet_api/api_pb2*.py)
# from exporter/kubernetes/kubelet_api/api.proto with grpcio-tools (a test extra:
# `.venv/bin/pip install -e '.[test]'`). Run from anywhere; writes next to the .proto.
# The generated files are shipped, so installing the exporter needs no protoc.
set -euo pipefail
cd "$(dirname "$0")/.."
py="${PYTHON:-.venv/bin/python}"
[ -x "$py" ] || py=python3
"$py" -m grpc_tools.protoc -I. --python_out=. --grpc_python_out=. exporter/kubernetes/kubelet_api/api.proto
echo "wrote exporter/kubernetes/kubelet_api/api_pb2.py and api_pb2_grpc.py"
