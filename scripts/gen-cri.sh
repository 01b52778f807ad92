#!/usr/bin/env bash
# Regenerates the Python stubs of the project's CRI proto (cri/v1/api.proto) through scripts/gen-proto.sh.
#
#   scripts/gen-cri.sh            write into the tree (cri/v1/), the output that is committed
#   scripts/gen-cri.sh OUT_DIR    write into OUT_DIR/cri/v1/ instead (tests compare that with the tree)
set -euo pipefail
exec "$(dirname "$0")/gen-proto.sh" cri/v1/api.proto \
    "runtime.v1: stubs generated from api.proto by scripts/gen-cri.sh. Do not edit; edit the proto and regenerate." "$@"
