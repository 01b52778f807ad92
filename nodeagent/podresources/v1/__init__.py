"""podresources v1: stubs generated from api.proto by scripts/gen-podresources.sh. Do not edit."""
