#!/usr/bin/env bash
# Regenerates the Python stubs of the project's CSI proto (csi/v1/csi.proto) through scripts/gen-proto.sh.
#
#   scripts/gen-csi.sh            write into the tree (csi/v1/), the output that is committed
#   scripts/gen-csi.sh OUT_DIR    write into OUT_DIR/csi/v1/ instead (tests compare that with the tree)
set -euo pipefail
exec "$(dirname "$0")/gen-proto.sh" csi/v1/csi.proto \
    "csi.v1: stubs generated from csi.proto by scripts/gen-csi.sh. Do not edit; edit the proto and regenerate." "$@"
