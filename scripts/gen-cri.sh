#!/usr/bin/env bash
# Regenerates the Python stubs of the project's CRI proto (cri/v1/api.proto): messages (api_pb2.py), gRPC stubs
# (api_pb2_grpc.py) and their typed mypy-protobuf stubs (.pyi), plus the package's __init__.py.
#
#   scripts/gen-cri.sh            write into the tree (cri/v1/), the output that is committed
#   scripts/gen-cri.sh OUT_DIR    write into OUT_DIR/cri/v1/ instead (tests compare that with the tree)
#
# protoc runs from the repo root with -I. so the proto is known as cri/v1/api.proto: the grpc module then imports
# `from cri.v1 import api_pb2`, and the output does not depend on where the repo or OUT_DIR lives.
set -euo pipefail
cd "$(dirname "$0")/.."

out="${1:-.}"
python="${PYTHON:-python3}"
mkdir -p "$out/cri/v1"

"$python" -m grpc_tools.protoc \
    -I. \
    --python_out="$out" \
    --grpc_python_out="$out" \
    --mypy_out="$out" \
    --mypy_grpc_out="$out" \
    cri/v1/api.proto

cat >"$out/cri/v1/__init__.py" <<'PY'
"""runtime.v1: stubs generated from api.proto by scripts/gen-cri.sh. Do not edit; edit the proto and regenerate."""
PY
