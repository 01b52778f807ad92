"""pluginregistration v1: stubs generated from api.proto by scripts/gen-pluginregistration.sh. Do not edit."""
