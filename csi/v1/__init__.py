"""csi.v1: stubs generated from csi.proto by scripts/gen-csi.sh. Do not edit; edit the proto and regenerate."""
