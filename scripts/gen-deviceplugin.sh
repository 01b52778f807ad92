#!/usr/bin/env bash
# Regenerates the Python stubs of the project's device plugin proto (nodeagent/devicemanager/v1beta1/api.proto)
# through scripts/gen-proto.sh.
#
#   scripts/gen-deviceplugin.sh            write into the tree (nodeagent/devicemanager/v1beta1/), the committed output
#   scripts/gen-deviceplugin.sh OUT_DIR    write into OUT_DIR/nodeagent/devicemanager/v1beta1/ instead (tests compare)
set -euo pipefail
exec "$(dirname "$0")/gen-proto.sh" nodeagent/devicemanager/v1beta1/api.proto \
    "deviceplugin v1beta1: stubs generated from api.proto by scripts/gen-deviceplugin.sh. Do not edit." "$@"
