"""dra v1: stubs generated from api.proto by scripts/gen-dra.sh. Do not edit."""
