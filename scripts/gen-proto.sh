#!/usr/bin/env bash
# Regenerates the Python stubs of one of the project's protos: messages (<name>_pb2.py), gRPC stubs (<name>_pb2_grpc.py)
# and their typed mypy-protobuf stubs (.pyi), plus the package's __init__.py with the docstring given. The wrappers
# gen-cri.sh, gen-csi.sh and gen-pluginregistration.sh name the proto and the docstring; the stubs' tests run them.
#
#   scripts/gen-proto.sh PROTO DOCSTRING            write next to PROTO in the tree, the output that is committed
#   scripts/gen-proto.sh PROTO DOCSTRING OUT_DIR    write into OUT_DIR/<PROTO's folder>/ instead (tests compare)
#
# PROTO is a path from the repo root (cri/v1/api.proto). protoc runs from the repo root with -I. so the proto is known
# by that path: the grpc module then imports `from cri.v1 import api_pb2`, and the output does not depend on where the
# repo or OUT_DIR lives (a relative OUT_DIR is taken from the repo root).
set -euo pipefail
cd "$(dirname "$0")/.."

proto="$1"
docstring="$2"
out="${3:-.}"
python="${PYTHON:-python3}"
package="$(dirname "$proto")"
mkdir -p "$out/$package"

"$python" -m grpc_tools.protoc \
    -I. \
    --python_out="$out" \
    --grpc_python_out="$out" \
    --mypy_out="$out" \
    --mypy_grpc_out="$out" \
    "$proto"

printf '"""%s"""\n' "$docstring" >"$out/$package/__init__.py"
