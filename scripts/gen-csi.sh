#!/usr/bin/env bash
# Regenerates the Python stubs of the project's CSI proto (csi/v1/csi.proto): messages (csi_pb2.py), gRPC stubs
# (csi_pb2_grpc.py) and their typed mypy-protobuf stubs (.pyi), plus the package's __init__.py.
#
#   scripts/gen-csi.sh            write into the tree (csi/v1/), the output that is committed
#   scripts/gen-csi.sh OUT_DIR    write into OUT_DIR/csi/v1/ instead (tests compare that with the tree)
#
# protoc runs from the repo root with -I. so the proto is known as csi/v1/csi.proto: the grpc module then imports
# `from csi.v1 import csi_pb2`, and the output does not depend on where the repo or OUT_DIR lives.
set -euo pipefail
cd "$(dirname "$0")/.."

out="${1:-.}"
python="${PYTHON:-python3}"
mkdir -p "$out/csi/v1"

"$python" -m grpc_tools.protoc \
    -I. \
    --python_out="$out" \
    --grpc_python_out="$out" \
    --mypy_out="$out" \
    --mypy_grpc_out="$out" \
    csi/v1/csi.proto

cat >"$out/csi/v1/__init__.py" <<'PY'
"""csi.v1: stubs generated from csi.proto by scripts/gen-csi.sh. Do not edit; edit the proto and regenerate."""
PY
