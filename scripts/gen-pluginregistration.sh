#!/usr/bin/env bash
# Regenerates the Python stubs of the project's plugin registration proto (csi/registration/v1/api.proto) through
# scripts/gen-proto.sh.
#
#   scripts/gen-pluginregistration.sh            write into the tree (csi/registration/v1/), the committed output
#   scripts/gen-pluginregistration.sh OUT_DIR    write into OUT_DIR/csi/registration/v1/ instead (tests compare)
set -euo pipefail
exec "$(dirname "$0")/gen-proto.sh" csi/registration/v1/api.proto \
    "pluginregistration v1: stubs generated from api.proto by scripts/gen-pluginregistration.sh. Do not edit." "$@"
