#!/usr/bin/env bash
# Regenerates the Python stubs of the project's plugin registration proto (csi/registration/v1/api.proto): messages
# (api_pb2.py), gRPC stubs (api_pb2_grpc.py) and their typed mypy-protobuf stubs (.pyi), plus the package's
# __init__.py. Same shape as scripts/gen-cri.sh.
#
#   scripts/gen-pluginregistration.sh            write into the tree (csi/registration/v1/), the committed output
#   scripts/gen-pluginregistration.sh OUT_DIR    write into OUT_DIR/csi/registration/v1/ instead (tests compare)
#
# protoc runs from the repo root with -I. so the grpc module imports `from csi.registration.v1 import api_pb2` and the
# output does not depend on where the repo or OUT_DIR lives.
set -euo pipefail
cd "$(dirname "$0")/.."

out="${1:-.}"
python="${PYTHON:-python3}"
mkdir -p "$out/csi/registration/v1"

"$python" -m grpc_tools.protoc \
    -I. \
    --python_out="$out" \
    --grpc_python_out="$out" \
    --mypy_out="$out" \
    --mypy_grpc_out="$out" \
    csi/registration/v1/api.proto

cat >"$out/csi/registration/v1/__init__.py" <<'PY'
"""pluginregistration v1: stubs generated from api.proto by scripts/gen-pluginregistration.sh. Do not edit."""
PY
