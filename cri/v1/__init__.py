"""runtime.v1: stubs generated from api.proto by scripts/gen-cri.sh. Do not edit; edit the proto and regenerate."""
