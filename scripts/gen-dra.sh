#!/usr/bin/env bash
# Regenerates the Python stubs of the project's DRA kubelet plugin proto (nodeagent/dra/v1/api.proto) through
# scripts/gen-proto.sh.
#
#   scripts/gen-dra.sh            write into the tree (nodeagent/dra/v1/), the committed output
#   scripts/gen-dra.sh OUT_DIR    write into OUT_DIR/nodeagent/dra/v1/ instead (tests compare)
set -euo pipefail
exec "$(dirname "$0")/gen-proto.sh" nodeagent/dra/v1/api.proto \
    "dra v1: stubs generated from api.proto by scripts/gen-dra.sh. Do not edit." "$@"
