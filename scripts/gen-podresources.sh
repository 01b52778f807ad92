#!/usr/bin/env bash
# Regenerates the Python stubs of the project's PodResources proto (nodeagent/podresources/v1/api.proto) through
# scripts/gen-proto.sh.
#
#   scripts/gen-podresources.sh            write into the tree (nodeagent/podresources/v1/), the committed output
#   scripts/gen-podresources.sh OUT_DIR    write into OUT_DIR/nodeagent/podresources/v1/ instead (tests compare)
set -euo pipefail
exec "$(dirname "$0")/gen-proto.sh" nodeagent/podresources/v1/api.proto \
    "podresources v1: stubs generated from api.proto by scripts/gen-podresources.sh. Do not edit." "$@"
